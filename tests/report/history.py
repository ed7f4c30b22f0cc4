"""Histories for the report's tests: a level shift, an environment change, regressions, two
branches, a sweep; and a hostile string."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from perfgate.gate import Status, Verdict
from perfgate.results import PhaseSummary, RunContext, RunRecord

from ..factories import measurement

START = datetime(2026, 11, 1, tzinfo=UTC)
HOSTILE = "</script><script>window.__pwned=1</script><!--\u2028\u2029&amp;<b>x</b>"
REPO = "https://github.com/example/perfgate"


def phases(verify_ms: float, repeats: int = 3) -> tuple[PhaseSummary, ...]:
    """Spec phases whose named parts and `other` (0.5 ms) add up to the cycle."""
    parts = {"draft": 1.0, "verify": verify_ms, "draft_extend": 0.8, "accept": 0.2}
    cycle = sum(parts.values()) + 0.5
    return tuple(
        PhaseSummary("spec", phase, r, 40, ms, ms, ms * 1.1)
        for r in range(repeats)
        for phase, ms in (*parts.items(), ("cycle", cycle))
    )


def run(
    i: int,
    scenario: str = "tiny",
    verify_ms: float = 5.0,
    status: Status = Status.PASS,
    branch: str = "main",
    fingerprint: dict[str, str] | None = None,
    config: dict[str, object] | None = None,
    rng: random.Random | None = None,
) -> RunRecord:
    """Run i of a history: tok/s follows verify time, with 1% noise from `rng`."""
    noise = rng.gauss(1.0, 0.01) if rng else 1.0
    m = measurement(
        scenario=scenario,
        spec_tok_s=600.0 / (verify_ms + 2.5) * noise,
        verify_ms=verify_ms * noise,
        started=START + timedelta(hours=i),
    )
    spec = replace(m.spec, phases=phases(verify_ms * noise))
    m = replace(m, spec=spec)
    if fingerprint is not None:
        m = replace(m, fingerprint={**m.fingerprint, **fingerprint})
    if config is not None:
        m = replace(m, config=config)
    verdicts = (
        Verdict("output_tok_s", status, "judged", 80.0, 80.0, 0.0, tolerance=0.05),
        Verdict("verify_ms", status, "judged", 5.0, 5.0, 0.0, tolerance=0.05),
    )
    context = RunContext(
        commit=f"{i:040x}",
        branch=branch,
        pr="12" if branch != "main" else None,
        ci_url=f"{REPO}/actions/runs/{1000 + i}",
    )
    return RunRecord(m, context, verdicts, status)


def stepped_history(runs: int = 40, seed: int = 3) -> list[RunRecord]:
    """Verify time steps from 5 to 6 ms at run 20 (regressions from there); torch upgraded
    at run 30; every fifth run on a feature branch."""
    rng = random.Random(seed)
    history = []
    for i in range(runs):
        slow = i >= runs // 2
        history.append(
            run(
                i,
                verify_ms=6.0 if slow else 5.0,
                status=Status.REGRESSION if slow else Status.PASS,
                branch="feature/x" if i % 5 == 4 else "main",
                fingerprint={"torch": "2.14.0" if i >= runs * 3 // 4 else "2.13.0"},
                rng=rng,
            )
        )
    return history


def sweep_history(start: int = 100) -> list[RunRecord]:
    """Three settings of steps of one setup, on another scenario name each."""
    return [
        run(
            start + steps,
            scenario=f"sweep-s{steps}",
            verify_ms=4.0 + steps,
            config={"model": "m", "steps": steps, "topk": 1, "draft_tokens": steps + 1},
        )
        for steps in (1, 2, 3)
    ]
