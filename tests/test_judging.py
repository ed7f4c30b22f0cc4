"""Measurements against baselines: verdicts with attribution, reruns, and the history."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baselines import Baseline, approve_run
from perfgate.config import load_config
from perfgate.equivalence import compare_outputs
from perfgate.gate import Status
from perfgate.measured_verdicts import judge_measurements
from perfgate.pipeline import ScenarioRun, record_linked
from perfgate.results import Measurement, PhaseSummary, RunContext, RunRecord
from perfgate.store import load_run, open_history

from .conftest import write_config
from .factories import QueuedMeasurer, measurement

GATED = ("output_tok_s", "speedup", "accept_length", "verify_ms")


def noisy(seed: int, tok_s: float = 120.0, verify_ms: float = 20.0, shift_sd: float = 0.004):
    """A measurement of 5 repeats whose cycle is `verify_ms` + 4 ms, with seeded noise."""
    rng = random.Random(seed)
    shift = rng.gauss(0.0, shift_sd)

    def jitter(level: float) -> tuple[float, ...]:
        return tuple(level * math.exp(shift + rng.gauss(0.0, 0.003)) for _ in range(5))

    phases = tuple(
        PhaseSummary("spec", phase, r, 50, ms, ms, ms)
        for r, verify in enumerate(jitter(verify_ms))
        for phase, ms in (
            ("draft", 1.0),
            ("verify", verify),
            ("accept", 0.5),
            ("cycle", verify + 4),
        )
    )
    base = measurement(plain_tok_s=100.0)
    spec = replace(
        base.spec,
        samples={
            "output_tok_s": jitter(tok_s),
            "accept_length": jitter(2.6),
            "verify_ms": tuple(p.median_ms for p in phases if p.phase == "verify"),
        },
        phases=phases,
    )
    plain = replace(base.plain, samples={"output_tok_s": jitter(100.0)})
    return replace(base, spec=spec, plain=plain)


def baseline_of(measurements: list[Measurement]) -> Baseline:
    result = None
    for run_id, m in enumerate(measurements, start=1):
        result = approve_run(
            result,
            profile="cpu",
            scenario="tiny",
            fingerprint=m.fingerprint,
            samples=m.samples(),
            phase_ms=m.phase_ms(),
            tolerances=dict.fromkeys(GATED, 0.03),
            gated=GATED,
            run_id=run_id,
            commit="abc",
            approved_by="alice",
            reason="baseline",
        )
    assert result is not None
    return result


BASELINE = baseline_of([noisy(seed) for seed in range(5)])


def test_a_slower_verify_is_caught_and_explained() -> None:
    slow = noisy(10, tok_s=104.0, verify_ms=24.0)
    verdicts = {v.metric: v for v in judge_measurements([slow], BASELINE)}
    assert verdicts["verify_ms"].status is Status.REGRESSION
    assert verdicts["accept_length"].status is Status.PASS
    tok_s = verdicts["output_tok_s"]
    assert tok_s.status is Status.REGRESSION and tok_s.attribution is not None
    shares = {p.phase: p.share for p in tok_s.attribution.phases}
    assert shares["verify"] == pytest.approx(1.0, abs=0.05)
    assert "verify +3.8 ms/cycle (+19%) explains 100%" in tok_s.attribution.summary
    assert "accept length unchanged" in tok_s.attribution.summary
    speedup = verdicts["speedup"]
    assert speedup.attribution is not None and speedup.attribution.tok_s_change is not None
    assert speedup.attribution.tok_s_change[1] == pytest.approx(0.0, abs=0.02)  # plain: same


def test_same_code_passes() -> None:
    verdicts = judge_measurements([noisy(11)], BASELINE)
    assert [v.status for v in verdicts] == [Status.PASS] * 4


def test_another_environment_is_incomparable_and_named() -> None:
    moved = replace(noisy(12), fingerprint={**noisy(12).fingerprint, "torch": "2.14.0"})
    verdicts = judge_measurements([moved], BASELINE)
    assert {v.status for v in verdicts} == {Status.INCOMPARABLE}
    assert "torch (2.13.0+cpu -> 2.14.0)" in verdicts[0].message


def test_judged_runs_keep_their_attribution_and_margins_in_the_history(tmp_path: Path) -> None:
    slow = noisy(13, tok_s=104.0, verify_ms=24.0)
    tied = compare_outputs(
        [(1, 2, 3), (4, 5, 6)],
        [(1, 2, 9), (4, 5, 6)],
        [[[], [], [(-0.70, 9), (-0.71, 3)]], []],
        max_near_tie_share=0.5,
    )
    slow = replace(
        slow,
        spec=replace(slow.spec, outputs=((1, 2, 3), (4, 5, 6))),
        plain=replace(slow.plain, outputs=((1, 2, 9), (4, 5, 6))),
        equivalence=tied,
        config={"max_near_tie_share": 0.5},
    )
    verdicts = tuple(judge_measurements([slow], BASELINE))
    record = RunRecord(slow, RunContext(commit="abc"), verdicts, Status.REGRESSION)
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with sessions.begin() as db:
        (recorded,) = record_linked(db, [record])
    with sessions() as db:
        loaded = load_run(db, recorded.id or 0)
    assert loaded.verdicts == verdicts
    assert loaded.measurement.equivalence == tied and loaded.measurement.equivalence.ok


def test_inconclusive_verdicts_measure_again_and_every_run_is_recorded(tmp_path: Path) -> None:
    # The first run sits near the tolerance; the runs measured again settle it.
    measurer = QueuedMeasurer(
        noisy(20, tok_s=116.5), noisy(21, tok_s=116.0), noisy(22, tok_s=116.0)
    )
    scenario = replace(load_config(write_config(tmp_path)).scenarios["tiny"], max_runs=3)
    run = ScenarioRun(scenario, tmp_path, measurer)
    verdicts = run.judge(BASELINE, alpha=0.2)
    assert len(run.looks) == len(run.measurements()) >= 2
    # Each run measured into a folder of its own.
    assert (
        measurer.folders == [tmp_path, *(tmp_path / f"run-{n}" for n in (2, 3))][: len(run.looks)]
    )
    assert Status.INCONCLUSIVE in {v.status for v in run.looks[0]}
    assert all(v.status is not Status.INCONCLUSIVE for v in verdicts) or len(run.looks) == 3
    records = run.records(RunContext())
    assert records[0].status is Status.INCONCLUSIVE
    assert records[-1].verdicts == tuple(verdicts)
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with sessions.begin() as db:
        recorded = record_linked(db, records)
    ids = [r.id for r in recorded]
    assert all(v.with_runs == tuple(ids[:-1]) for v in recorded[-1].verdicts)
    assert recorded[-1].verdicts[0].runs == len(ids)


def test_a_decided_first_run_is_not_measured_again(tmp_path: Path) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    run = ScenarioRun(scenario, tmp_path, QueuedMeasurer(noisy(30)))
    assert [v.status for v in run.judge(BASELINE, alpha=0.2)] == [Status.PASS] * 4
    assert run.reruns == [] and len(run.looks) == 1


def test_a_regression_already_decided_is_not_measured_again(tmp_path: Path) -> None:
    # verify 30% slower decides the scenario's status; tok/s sits near its tolerance
    # (inconclusive), but no further run could turn the build green, so none is measured.
    measurer = QueuedMeasurer(*(noisy(seed, tok_s=116.5, verify_ms=26.0) for seed in (40, 41, 42)))
    scenario = replace(load_config(write_config(tmp_path)).scenarios["tiny"], max_runs=3)
    run = ScenarioRun(scenario, tmp_path, measurer)
    verdicts = {v.metric: v.status for v in run.judge(BASELINE, alpha=0.2)}
    assert verdicts["verify_ms"] is Status.REGRESSION
    assert Status.INCONCLUSIVE in verdicts.values()
    assert run.reruns == [] and len(run.looks) == 1 and len(measurer.queue) == 2
