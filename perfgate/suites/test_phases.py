"""Per-phase timings of the decode cycle: present, consistent, and not regressed."""

from __future__ import annotations

from perfgate import metrics
from perfgate.session import GateSession

PHASE_METRICS = ("verify_ms", "verify_steps", "draft_ms", "draft_extend_ms", "cycle_ms")


def test_phase_breakdown(perfgate_session: GateSession, perfgate_scenario: str) -> None:
    spec = perfgate_session.server_result(perfgate_scenario, "spec")
    seen = {p.phase for p in spec.phases}
    assert {metrics.DRAFT, metrics.VERIFY, metrics.CYCLE} <= seen, f"phases probed: {seen}"
    for repeat in {p.repeat for p in spec.phases}:
        mean = {p.phase: p.mean_ms for p in spec.phases if p.repeat == repeat}
        named = sum(mean.get(phase, 0.0) for phase in metrics.NAMED_PHASES)
        # The named phases run inside the cycle: together they cannot outlast it.
        assert named <= mean[metrics.CYCLE] * 1.001, f"repeat {repeat}: {mean}"


def test_phase_verdicts(perfgate_session: GateSession, perfgate_scenario: str) -> None:
    verdicts = perfgate_session.failing_verdicts(perfgate_scenario)
    failed = [
        f"{v.metric}: {v.status.value}: {v.message}" for v in verdicts if v.metric in PHASE_METRICS
    ]
    assert not failed, "\n".join(failed)
