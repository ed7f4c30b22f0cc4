"""Whether the GPUs are fit for a job, for the job hooks and `perfgate doctor`: idle, healthy,
and the settings of theirs that shape timings. The GPUs themselves are read by
`perfgate.devices`; what is judged here is one `GpuReport` of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from perfgate.devices import EVENT_REASONS, ComputeApp, Gpu, GpuReport

# Reasons that mean the hardware holds the clocks down: timings taken now are not comparable.
UNHEALTHY_REASONS = 0x8 | 0x20 | 0x40 | 0x80

DEFAULT_MAX_MEMORY_MIB = 1024.0  # what an idle GPU may show in use (driver, persistence)
DEFAULT_MAX_UTILIZATION = 5.0  # percent


@dataclass(frozen=True)
class Limits:
    """What an idle GPU may show at the start of a job."""

    max_memory_mib: float = DEFAULT_MAX_MEMORY_MIB
    max_utilization_pct: float = DEFAULT_MAX_UTILIZATION


def unhealthy_reasons(gpu: Gpu) -> list[str]:
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


def busy_reasons(gpu: Gpu, apps: Sequence[ComputeApp], limits: Limits) -> list[str]:
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

    gpu: Gpu
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


def fingerprint_fields(gpus: Sequence[Gpu]) -> dict[str, str]:
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
