"""The one door to the machine's NVIDIA GPUs: what each one is, and what it is doing now.

Read through NVIDIA's own NVML binding (``import pynvml``, from the nvidia-ml-py package that
GPU images carry; perfgate does not depend on it) where it imports and ``nvmlInit`` succeeds,
and through ``nvidia-smi --query-gpu`` otherwise. Both give the same typed `GpuReport`, one
`Gpu` per device in the driver's (PCI bus) order; `read_gpus` returns None where neither is
there (a laptop, a CPU runner).

What a machine's GPUs *are* (model, count, driver, CUDA) is read once per process by
`detect_gpus`; what they are *doing* (memory in use, clocks, processes) is read afresh by
every `read_gpus`, for the callers that wait for a GPU to be released or idle.

``PERFGATE_GPU_READER`` picks the door: ``nvml``, ``nvidia-smi``, or ``auto`` (the default:
NVML where it works). Tests install a `FakeReader` with `use_reader`, or put a stand-in
``nvidia-smi`` on PATH and set ``PERFGATE_GPU_READER=nvidia-smi`` (a subprocess too).

Through nvidia-smi, the fields below are those ``nvidia-smi --help-query-gpu`` listed on an
H200 with driver 580.159.04. A field an older driver does not know is dropped from the query
and named in ``GpuReport.not_queried``, so one missing field never hides the others. Values a
GPU does not report (``[N/A]``, ``[Not Supported]``; NVML's NotSupported) read as None.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Protocol

from perfgate.errors import ConfigError, InfrastructureError
from perfgate.hardware import GpuInfo, default_profile, machine_id

VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"  # which GPUs a process sees (CUDA's own variable)
READER_VARIABLE = "PERFGATE_GPU_READER"
READERS = ("auto", "nvml", "nvidia-smi")
TIMEOUT_S = 30.0

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
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')

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


@dataclass(frozen=True)
class Gpu:
    """One GPU at one look; None where the driver did not say."""

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
    """A process holding a CUDA context on a GPU."""

    pid: int
    gpu_uuid: str
    used_memory_mib: float | None


@dataclass(frozen=True)
class GpuReport:
    """What one look at the machine found: the GPUs, their processes, fields not queried."""

    gpus: tuple[Gpu, ...]
    apps: tuple[ComputeApp, ...] = ()
    not_queried: tuple[str, ...] = ()
    source: str = field(default="nvidia-smi", compare=False)  # which door: "nvidia-smi", "NVML"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [asdict(g) for g in self.gpus],
            "apps": [asdict(a) for a in self.apps],
            "not_queried": list(self.not_queried),
        }


class Reader(Protocol):
    """A door to the GPUs: a fresh look at them, and the CUDA version the driver supports."""

    def read(self, apps: bool, timeout_s: float) -> GpuReport: ...

    def cuda_version(self, timeout_s: float) -> str | None: ...


class SmiReader:
    """The GPUs through ``nvidia-smi --query-gpu``: one process per look."""

    def read(self, apps: bool, timeout_s: float) -> GpuReport:
        fields, rows, dropped = _query([*REQUIRED_FIELDS, *HEALTH_FIELDS], timeout_s)
        gpus = tuple(_read_row(fields, row) for row in rows)
        listed: list[str] = []
        if apps:
            done = _smi([f"--query-compute-apps={APPS_QUERY}", _CSV], timeout_s)
            listed = done.stdout.splitlines() if done.returncode == 0 else []
        found = tuple(_parse_app(line) for line in listed if line.strip())
        return GpuReport(gpus, found, tuple(dropped), source="nvidia-smi")

    def cuda_version(self, timeout_s: float) -> str | None:
        """The "CUDA Version" of nvidia-smi's header; None where it shows none."""
        try:
            done = _smi([], timeout_s)
        except InfrastructureError:
            return None
        found = re.search(r"CUDA Version:\s*([\d.]+)", done.stdout if done.returncode == 0 else "")
        return found.group(1) if found else None


_CSV = "--format=csv,noheader,nounits"


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
        done = _smi([f"--query-gpu={','.join(fields)}", _CSV], timeout_s)
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


def _read_row(fields: Sequence[str], row: str) -> Gpu:
    """parse_gpu_row, or an InfrastructureError quoting a row that is not one GPU's fields."""
    try:
        return parse_gpu_row(fields, row)
    except (KeyError, ValueError) as error:
        raise InfrastructureError(
            f"nvidia-smi --query-gpu gave a row perfgate cannot read ({error}): {row.strip()!r};"
            f" expected {len(fields)} comma-separated fields: {','.join(fields)}"
        ) from None


def parse_gpu_row(fields: Sequence[str], row: str) -> Gpu:
    """One `--format=csv,noheader,nounits` row of `fields` as a Gpu."""
    raw = dict(zip(fields, (part.strip() for part in row.split(",")), strict=False))
    got: Mapping[str, str | None] = {name: _value(text) for name, text in raw.items()}
    reasons = got.get("clocks_event_reasons.active") or got.get("clocks_throttle_reasons.active")
    ecc = _number(got.get("ecc.errors.uncorrected.volatile.total"))
    remaps = _number(got.get("remapped_rows.pending"))
    return Gpu(
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


class NvmlReader:
    """The GPUs through NVML, as nvidia-smi shows them (nvidia-smi reads NVML too)."""

    source = "NVML"

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml  # pynvml, initialised

    def read(self, apps: bool, timeout_s: float) -> GpuReport:
        nvml = self.nvml
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
            looks = [_nvml_gpu(nvml, index, handle, driver) for index, handle in enumerate(handles)]
            found = [
                app
                for (gpu, _), handle in zip(looks, handles, strict=True)
                for app in (_nvml_apps(nvml, handle, gpu.uuid) if apps else [])
            ]
        except nvml.NVMLError as error:
            raise InfrastructureError(
                f"NVML failed: {error}; `nvidia-smi` shows the driver's own error"
            ) from None
        lacking = {name for _, missing in looks for name in missing}
        not_queried = tuple(name for name in HEALTH_FIELDS if name in lacking)
        return GpuReport(tuple(gpu for gpu, _ in looks), tuple(found), not_queried, self.source)

    def cuda_version(self, timeout_s: float) -> str | None:
        """The CUDA version the driver supports, as nvidia-smi's header shows it (12080: 12.8)."""
        try:
            version = int(self.nvml.nvmlSystemGetCudaDriverVersion())
        except self.nvml.NVMLError:
            return None
        return f"{version // 1000}.{version % 1000 // 10}"


# NVML's error codes (nvml.h) that mean "this GPU or driver does not tell".
NVML_NOT_SUPPORTED, NVML_NO_PERMISSION, NVML_FUNCTION_NOT_FOUND = 3, 4, 13
MIB = 1 << 20


def _text(value: str | bytes) -> str:
    """NVML's strings: bytes from older bindings, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value


def _nvml_gpu(nvml: Any, index: int, handle: Any, driver: str) -> tuple[Gpu, list[str]]:
    """One GPU, and the nvidia-smi fields this driver or binding cannot read."""
    used, total = _nvml_memory(nvml, handle)
    health: dict[str, Any] = {}
    missing = []
    for name, (attribute, getter) in NVML_HEALTH.items():
        try:
            health[attribute] = getter(nvml, handle)
        except AttributeError:  # a binding older than the function
            missing.append(name)
        except nvml.NVMLError as error:
            if error.value == NVML_FUNCTION_NOT_FOUND:  # a driver older than the function
                missing.append(name)
            elif error.value not in (NVML_NOT_SUPPORTED, NVML_NO_PERMISSION):
                raise
    gpu = Gpu(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        driver=driver,
        memory_used_mib=used,
        memory_total_mib=total,
        **health,
    )
    return gpu, missing


def _mib(size_bytes: int) -> float:
    """Bytes in MiB as nvidia-smi shows them: rounded up (on an H200, 21006.8 MiB in use
    shows as 21007, 615.06 reserved as 616)."""
    return float(math.ceil(size_bytes / MIB))


def _nvml_memory(nvml: Any, handle: Any) -> tuple[float, float]:
    """Used and total MiB as nvidia-smi shows them: the v2 query leaves out what the driver
    reserves for itself, which v1 counts as used."""
    info = None
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except nvml.NVMLError as error:
            if error.value != NVML_FUNCTION_NOT_FOUND:
                raise
    if info is None:
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return _mib(info.used), _mib(info.total)


def _nvml_apps(nvml: Any, handle: Any, uuid: str) -> list[ComputeApp]:
    """The processes holding a CUDA context on one GPU; [] where NVML will not say."""
    try:
        listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError:
        return []
    return [
        ComputeApp(int(p.pid), uuid, _mib(p.usedGpuMemory) if p.usedGpuMemory is not None else None)
        for p in listed
    ]


def _event_reasons(nvml: Any, handle: Any) -> int:
    newer = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if newer is not None:
        try:
            return int(newer(handle))
        except nvml.NVMLError as error:
            if error.value != NVML_FUNCTION_NOT_FOUND:
                raise
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _persistence(nvml: Any, handle: Any) -> str:
    enabled = nvml.nvmlDeviceGetPersistenceMode(handle) == nvml.NVML_FEATURE_ENABLED
    return "Enabled" if enabled else "Disabled"


# nvidia-smi's health field -> (the Gpu attribute, how NVML tells it, in nvidia-smi's units).
NVML_HEALTH: Mapping[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "utilization.gpu": (
        "utilization_pct",
        lambda n, h: float(n.nvmlDeviceGetUtilizationRates(h).gpu),
    ),
    "clocks_event_reasons.active": ("event_reasons", _event_reasons),
    "ecc.errors.uncorrected.volatile.total": (
        "ecc_uncorrected",
        lambda n, h: int(
            n.nvmlDeviceGetTotalEccErrors(
                h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
            )
        ),
    ),
    "retired_pages.pending": (
        "retired_pages_pending",
        lambda n, h: bool(n.nvmlDeviceGetRetiredPagesPendingStatus(h)),
    ),
    # nvmlDeviceGetRemappedRows: (corrected rows, uncorrected rows, pending, failure occurred)
    "remapped_rows.pending": (
        "remapped_rows_pending",
        lambda n, h: int(n.nvmlDeviceGetRemappedRows(h)[2]),
    ),
    "remapped_rows.failure": (
        "remapped_rows_failure",
        lambda n, h: bool(n.nvmlDeviceGetRemappedRows(h)[3]),
    ),
    "clocks.sm": ("sm_clock_mhz", lambda n, h: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
    "clocks.max.sm": (
        "sm_clock_max_mhz",
        lambda n, h: float(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
    ),
    "clocks.applications.graphics": (
        "app_clock_mhz",
        lambda n, h: float(n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_GRAPHICS)),
    ),
    "power.limit": (  # milliwatts; nvidia-smi shows watts with two decimals
        "power_limit_w",
        lambda n, h: round(n.nvmlDeviceGetPowerManagementLimit(h) / 1000, 2),
    ),
    "persistence_mode": ("persistence_mode", _persistence),
    "temperature.gpu": (
        "temperature_c",
        lambda n, h: float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
    ),
}


@dataclass
class FakeReader:
    """GPUs as a test sets them, through `use_reader`: `gpus` and `apps` may change between
    looks (a server taking memory, then freeing it); `reads` counts the looks."""

    gpus: list[Gpu] = field(default_factory=list)
    apps: list[ComputeApp] = field(default_factory=list)
    cuda: str | None = "12.8"
    reads: int = 0

    def read(self, apps: bool, timeout_s: float) -> GpuReport:
        self.reads += 1
        return GpuReport(tuple(self.gpus), tuple(self.apps) if apps else (), source="fake")

    def cuda_version(self, timeout_s: float) -> str | None:
        return self.cuda


_installed: list[Reader | None] = []  # use_reader's stack: the innermost block wins


@functools.cache
def _nvml() -> tuple[ModuleType | None, str]:
    """pynvml, initialised once per process; or None and why not."""
    try:
        with warnings.catch_warnings():  # the deprecated `pynvml` package warns on import
            warnings.simplefilter("ignore")
            nvml = importlib.import_module("pynvml")
    except ImportError:
        return None, "pynvml (the nvidia-ml-py package) is not installed"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:  # no driver, no libnvidia-ml.so.1
        return None, f"nvmlInit failed: {error}"
    return nvml, ""


def current_reader() -> Reader | None:
    """The door to the GPUs: a reader `use_reader` installed, NVML, nvidia-smi, or None."""
    if _installed:
        return _installed[-1]
    choice = os.environ.get(READER_VARIABLE) or "auto"
    if choice not in READERS:
        raise ConfigError(
            f"{choice!r} is not a way to read the GPUs",
            field=READER_VARIABLE,
            fix=f"set it to {', '.join(READERS)}, or unset it",
        )
    if choice != "nvidia-smi":
        nvml, why = _nvml()
        if nvml is not None:
            return NvmlReader(nvml)
        if choice == "nvml":
            raise ConfigError(
                f"asks for NVML, which cannot be used here: {why}",
                field=READER_VARIABLE,
                fix="install nvidia-ml-py beside perfgate, or set it to nvidia-smi",
            )
    return SmiReader() if shutil.which("nvidia-smi") is not None else None


def read_gpus(apps: bool = True, timeout_s: float = TIMEOUT_S) -> GpuReport | None:
    """A fresh look at every GPU and, with `apps`, the processes on them; None where there
    is no door to the GPUs (no NVML, no nvidia-smi on PATH)."""
    reader = current_reader()
    return None if reader is None else reader.read(apps, timeout_s)


@functools.cache
def detect_gpus() -> GpuInfo | None:
    """The GPUs as the fingerprint and the runner profile name them: model, count, driver,
    CUDA, and the machine (all its GPUs' UUIDs, digested). Read once per process
    (`reset_cache` forgets it); None where there is no GPU or the driver does not answer."""
    reader = current_reader()
    if reader is None:
        return None
    try:
        report = reader.read(apps=False, timeout_s=TIMEOUT_S)
    except InfrastructureError:
        return None
    if not report.gpus:
        return None
    first = report.gpus[0]
    cuda = reader.cuda_version(TIMEOUT_S) or "unknown"
    return GpuInfo(
        name=first.name,
        driver=first.driver,
        cuda=cuda,
        count=len(report.gpus),
        machine=machine_id([gpu.uuid for gpu in report.gpus]),
    )


def listed_devices(environ: Mapping[str, str]) -> str | None:
    """CUDA_VISIBLE_DEVICES of `environ`, the one place perfgate reads it; None when unset."""
    return environ.get(VISIBLE_VARIABLE)


def visible_gpus(
    gpus: Sequence[Gpu],
    cuda_visible_devices: str | None,
    where: str = VISIBLE_VARIABLE,
    *,
    strict: bool = True,
) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES selects (indices or UUIDs), in its order; all if unset.

    Indices are read in nvidia-smi's (PCI bus) order, as with CUDA_DEVICE_ORDER=PCI_BUS_ID.
    MIG devices cannot be matched to a GPU here and are left out. An entry that names no GPU
    of this machine is refused (ConfigError naming `where`), or with `strict=False` (a health
    check, which reports on what is there) left out.
    """
    if cuda_visible_devices is None:
        return list(gpus)
    chosen = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if not entry or entry.startswith("MIG-"):
            continue
        gpu = _match(gpus, entry)
        if gpu is None and not strict:
            continue
        if gpu is None:
            shown = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
            raise ConfigError(
                f"names GPU {entry!r}, which this machine does not have",
                field=where,
                fix=f"use indices or UUIDs of the GPUs nvidia-smi shows: {shown}",
            )
        chosen.append(gpu)
    return chosen


def _match(gpus: Sequence[Gpu], entry: str) -> Gpu | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    matches = [g for g in gpus if g.uuid.startswith(entry)]  # CUDA accepts a unique prefix
    return matches[0] if len(matches) == 1 else None


PROFILE_FIELD = "runner profile (--profile, PERFGATE_PROFILE)"


def runner_profile(given: str | None, detect: Callable[[], GpuInfo | None] = detect_gpus) -> str:
    """The runner profile a command uses: `given` (--profile, where Settings applied
    $PERFGATE_PROFILE), checked as a name a history and a baseline file can hold, else the name
    of this machine's hardware (`default_profile` of the GPUs `detect` finds). Every command
    that names baselines or history series asks here."""
    if given:
        from perfgate.config import check_history_name

        check_history_name(given, field=PROFILE_FIELD)
        return given
    return default_profile(detect())


def reset_cache() -> None:
    """Forget what was read once per process: the GPUs `detect_gpus` found, NVML's handle."""
    detect_gpus.cache_clear()
    _nvml.cache_clear()


@contextmanager
def use_reader(reader: Reader | None) -> Iterator[None]:
    """Read the GPUs through `reader` inside the block; None is a machine without GPUs.

    For tests: ``with use_reader(FakeReader([gpu])): ...`` reads `gpu` and nothing else,
    whatever the machine has. A subprocess cannot inherit it; give one a stand-in nvidia-smi
    on PATH and ``PERFGATE_GPU_READER=nvidia-smi`` instead.
    """
    _installed.append(reader)
    reset_cache()
    try:
        yield
    finally:
        _installed.pop()
        reset_cache()
