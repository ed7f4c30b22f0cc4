"""Which methods form each phase, per engine: data, not code.

The probe wraps each listed method; the time spent inside it is charged to its phase. The
method listed for `cycle` must run once per decode cycle and enclose the other phases.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfgate import metrics


@dataclass(frozen=True)
class ProbeTarget:
    module: str
    qualname: str  # class name inside the module
    method: str
    phase: str


_EMBEDDED_WORKER = "perfgate.engines.embedded.worker"

EMBEDDED_TARGETS: tuple[ProbeTarget, ...] = (
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "prefill", metrics.PREFILL),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "cycle", metrics.CYCLE),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "draft", metrics.DRAFT),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "verify", metrics.VERIFY),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "accept", metrics.ACCEPT),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "draft_extend", metrics.DRAFT_EXTEND),
    ProbeTarget(_EMBEDDED_WORKER, "PlainWorker", "prefill", metrics.PREFILL),
    ProbeTarget(_EMBEDDED_WORKER, "PlainWorker", "decode_step", metrics.CYCLE),
)

TARGET_TABLES: dict[str, tuple[ProbeTarget, ...]] = {
    "embedded": EMBEDDED_TARGETS,
}
