"""Every GPU's state for the job hooks and `perfgate doctor`: idle, healthy, and its clocks.

Read through ``nvidia-smi --query-gpu`` (the fields below were listed by
``nvidia-smi --help-query-gpu`` on an H200 with driver 580.159.04). A field an older driver
does not know is dropped from the query and named in ``GpuReport.not_queried``, so one missing
field never hides the others. Values a GPU does not report (``[N/A]``, ``[Not Supported]``)
read as None and are never held against it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from perfgate.errors import InfrastructureError

REQUIRED_FIELDS = ("index", "uuid", "name", "driver_version", "memory.used", "memory.total")
HEALTH_FIELDS = (
    "utilization.gpu",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.applications.graphics",
    "power.limit",
    "persistence_mode",
    "temperature.gpu",
)
# Drivers before the "event reasons" rename spell the bitmask this way.
OLD_SPELLINGS = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
APPS_QUERY = "pid,gpu_uuid,used_memory"

# Clock event reasons, bits of nvml.h's nvmlClocksThrottleReason* (nvmlClocksEventReason*).
EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the hardware holds the clocks down: timings taken now are not comparable.
UNHEALTHY_REASONS = 0x8 | 0x20 | 0x40 | 0x80

DEFAULT_MAX_MEMORY_MIB = 1024.0  # what an idle GPU may show in use (driver, persistence)
DEFAULT_MAX_UTILIZATION = 5.0  # percent
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


@dataclass(frozen=True)
class GpuState:
    """One GPU as nvidia-smi showed it; None where it did not say."""

    index: int
    uuid: str
    name: str
    driver: str
    memory_used_mib: float
    memory_total_mib: float
    utilization_pct: float | None = None
    event_reasons: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: int | None = None
    remapped_rows_failure: bool | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    app_clock_mhz: float | None = None
    power_limit_w: float | None = None
    persistence_mode: str | None = None
    temperature_c: float | None = None

    def reasons(self) -> list[str]:
        """The clock event reasons active now, by name."""
        bits = self.event_reasons or 0
        return [name for bit, name in EVENT_REASONS.items() if bits & bit]


@dataclass(frozen=True)
class ComputeApp:
    """A process holding a CUDA context, as `--query-compute-apps` lists it."""

    pid: int
    gpu_uuid: str
    used_memory_mib: float | None


@dataclass(frozen=True)
class GpuReport:
    """What one look at the machine found: the GPUs, their processes, fields not queried."""

    gpus: tuple[GpuState, ...]
    apps: tuple[ComputeApp, ...] = ()
    not_queried: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [asdict(g) for g in self.gpus],
            "apps": [asdict(a) for a in self.apps],
            "not_queried": list(self.not_queried),
        }


@dataclass(frozen=True)
class Limits:
    """What an idle GPU may show at the start of a job."""

    max_memory_mib: float = DEFAULT_MAX_MEMORY_MIB
    max_utilization_pct: float = DEFAULT_MAX_UTILIZATION


def _smi(args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise InfrastructureError(f"nvidia-smi failed: {error}") from None


def _query(fields: Sequence[str], timeout_s: float) -> tuple[list[str], list[str], list[str]]:
    """Rows of `fields`, dropping (and returning) the fields this driver rejects."""
    fields, dropped = list(fields), []
    while True:
        done = _smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], timeout_s)
        bad = _INVALID_FIELD.search(done.stdout + done.stderr)
        if done.returncode == 0 or bad is None or bad.group(1) in REQUIRED_FIELDS:
            break
        fields.remove(bad.group(1))
        dropped.append(bad.group(1))
        if bad.group(1) in OLD_SPELLINGS:
            fields.append(OLD_SPELLINGS[bad.group(1)])
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InfrastructureError(f"nvidia-smi failed (code {done.returncode}): {reason[0]}")
    rows = [line for line in done.stdout.splitlines() if line.strip()]
    return fields, rows, dropped


def read_gpus(timeout_s: float = 30.0) -> GpuReport | None:
    """Every GPU and the processes on them; None where there is no `nvidia-smi`."""
    if shutil.which("nvidia-smi") is None:
        return None
    fields, rows, dropped = _query([*REQUIRED_FIELDS, *HEALTH_FIELDS], timeout_s)
    gpus = tuple(parse_gpu_row(fields, row) for row in rows)
    apps = _smi([f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"], timeout_s)
    listed = apps.stdout.splitlines() if apps.returncode == 0 else []
    return GpuReport(
        gpus, tuple(_parse_app(line) for line in listed if line.strip()), tuple(dropped)
    )


def _value(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") or text in ("N/A", "Unknown") else text


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _flag(text: str | None) -> bool | None:
    if text is None:
        return None
    return text.lower() in ("yes", "1", "true", "enabled")


def parse_gpu_row(fields: Sequence[str], row: str) -> GpuState:
    """One `--format=csv,noheader,nounits` row of `fields` as a GpuState."""
    raw = dict(zip(fields, (part.strip() for part in row.split(",")), strict=False))
    got: Mapping[str, str | None] = {name: _value(text) for name, text in raw.items()}
    reasons = got.get("clocks_event_reasons.active") or got.get("clocks_throttle_reasons.active")
    ecc = _number(got.get("ecc.errors.uncorrected.volatile.total"))
    remaps = _number(got.get("remapped_rows.pending"))
    return GpuState(
        index=int(raw["index"]),
        uuid=raw["uuid"],
        name=raw["name"],
        driver=raw["driver_version"],
        memory_used_mib=_number(got["memory.used"]) or 0.0,
        memory_total_mib=_number(got["memory.total"]) or 0.0,
        utilization_pct=_number(got.get("utilization.gpu")),
        event_reasons=int(reasons, 16) if reasons else None,
        ecc_uncorrected=int(ecc) if ecc is not None else None,
        retired_pages_pending=_flag(got.get("retired_pages.pending")),
        remapped_rows_pending=int(remaps) if remaps is not None else None,
        remapped_rows_failure=_flag(got.get("remapped_rows.failure")),
        sm_clock_mhz=_number(got.get("clocks.sm")),
        sm_clock_max_mhz=_number(got.get("clocks.max.sm")),
        app_clock_mhz=_number(got.get("clocks.applications.graphics")),
        power_limit_w=_number(got.get("power.limit")),
        persistence_mode=got.get("persistence_mode"),
        temperature_c=_number(got.get("temperature.gpu")),
    )


def _parse_app(line: str) -> ComputeApp:
    pid, uuid, used = (part.strip() for part in line.split(",")[:3])
    return ComputeApp(int(pid), uuid, _number(_value(used)))


def select_visible(gpus: Sequence[GpuState], cuda_visible_devices: str | None) -> list[GpuState]:
    """The GPUs `CUDA_VISIBLE_DEVICES` names (indices or UUID prefixes); all when unset."""
    if not cuda_visible_devices:
        return list(gpus)
    wanted = [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()]
    return [
        g
        for g in gpus
        if any(w == str(g.index) or (not w.isdigit() and g.uuid.startswith(w)) for w in wanted)
    ]


def unhealthy_reasons(gpu: GpuState) -> list[str]:
    """Why timings taken on this GPU now could not be trusted; [] for a healthy one."""
    problems = []
    slow = [
        n for bit, n in EVENT_REASONS.items() if (gpu.event_reasons or 0) & bit & UNHEALTHY_REASONS
    ]
    if slow:
        problems.append(f"clocks held down by {', '.join(slow)}")
    if gpu.ecc_uncorrected:
        problems.append(f"{gpu.ecc_uncorrected} uncorrected ECC error(s) since the driver loaded")
    if gpu.remapped_rows_pending:
        problems.append(f"{gpu.remapped_rows_pending} row remap(s) pending a GPU reset")
    if gpu.remapped_rows_failure:
        problems.append("a row remap failed")
    if gpu.retired_pages_pending:
        problems.append("page retirement pending a GPU reset")
    return problems


def busy_reasons(gpu: GpuState, apps: Sequence[ComputeApp], limits: Limits) -> list[str]:
    """Why this GPU is not idle: memory, utilisation, processes holding it; [] when idle."""
    problems = []
    if gpu.memory_used_mib > limits.max_memory_mib:
        problems.append(
            f"{gpu.memory_used_mib:.0f} of {gpu.memory_total_mib:.0f} MiB in use "
            f"(an idle GPU shows at most {limits.max_memory_mib:.0f})"
        )
    if gpu.utilization_pct is not None and gpu.utilization_pct > limits.max_utilization_pct:
        problems.append(f"{gpu.utilization_pct:.0f}% utilised")
    holders = [a.pid for a in apps if a.gpu_uuid == gpu.uuid]
    if holders:
        problems.append(f"held by pid {', '.join(str(pid) for pid in holders)}")
    return problems


@dataclass(frozen=True)
class GpuProblem:
    """One GPU the job must not run on, and why."""

    gpu: GpuState
    kind: str  # "busy" or "unhealthy"
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        return f"GPU {self.gpu.index} ({self.gpu.name}) is {self.kind}: {'; '.join(self.reasons)}"


def find_problems(report: GpuReport, limits: Limits) -> list[GpuProblem]:
    """Every GPU of `report` that is unhealthy or busy, unhealthy first."""
    found = []
    for gpu in report.gpus:
        if unhealthy := unhealthy_reasons(gpu):
            found.append(GpuProblem(gpu, "unhealthy", tuple(unhealthy)))
    for gpu in report.gpus:
        if busy := busy_reasons(gpu, report.apps, limits):
            found.append(GpuProblem(gpu, "busy", tuple(busy)))
    return found


def fingerprint_fields(gpus: Sequence[GpuState]) -> dict[str, str]:
    """The settings of the GPUs that shape timings, for a run's fingerprint.

    Settings only (maximum and application clocks, power limit, persistence, driver), never
    readings that move between jobs (current clocks, temperature): two runs on one machine
    with the same settings stay comparable.
    """

    def joined(values: Sequence[object]) -> str | None:
        shown = [_shown(v) for v in values if v is not None]
        if not shown:
            return None
        return shown[0] if len(set(shown)) == 1 else ",".join(shown)

    fields = {
        "driver": joined([g.driver for g in gpus]),
        "gpu_sm_clock_max_mhz": joined([g.sm_clock_max_mhz for g in gpus]),
        "gpu_app_clock_mhz": joined([g.app_clock_mhz for g in gpus]),
        "gpu_power_limit_w": joined([g.power_limit_w for g in gpus]),
        "gpu_persistence_mode": joined([g.persistence_mode for g in gpus]),
    }
    return {name: value for name, value in fields.items() if value is not None}


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
