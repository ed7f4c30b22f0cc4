"""The runs a verdict takes: planned from the baseline's spread, capped by runner time, shown."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.gate import Status, judge_look
from perfgate.gate.planning import plan_runs, supported_tolerance
from perfgate.pipeline import ScenarioRun, record_linked
from perfgate.results import Measurement, RunContext, RunRecord
from perfgate.store import load_run, open_history
from perfgate.verdict_text import render_record

from .conftest import TINY_SCENARIO, write_config
from .factories import QueuedMeasurer
from .test_gate_cli import cli, record
from .test_judging import baseline_of, noisy

GATED = ("output_tok_s", "verify_ms")


def runs_of(
    sd_between: float, count: int, seed: int, sd_within: float = 0.005
) -> list[list[float]]:
    rng = random.Random(seed)
    runs = []
    for _ in range(count):
        shift = rng.gauss(0.0, sd_between)
        runs.append([100.0 * math.exp(shift + rng.gauss(0.0, sd_within)) for _ in range(5)])
    return runs


def test_a_calm_baseline_is_judged_after_every_run_as_before() -> None:
    baseline = {m: runs_of(0.003, 10, seed) for seed, m in enumerate(GATED)}
    plan = plan_runs(baseline, dict.fromkeys(GATED, 0.03), GATED, alpha=0.2, beta=0.2, max_runs=3)
    assert (plan.first_look, plan.max_runs, plan.short) == (1, 3, ())


def test_launches_that_scatter_near_the_tolerance_wait_for_several_runs() -> None:
    # Launches about 2-3% apart (as tok/s scattered over ten launches on an H200), against 5%.
    baseline = {"output_tok_s": runs_of(0.03, 10, 6), "verify_ms": runs_of(0.001, 10, 2)}
    tolerances = {"output_tok_s": 0.05, "verify_ms": 0.01}
    plan = plan_runs(baseline, tolerances, GATED, alpha=0.2, beta=0.2, max_runs=10, budget_runs=11)
    tok_s, verify = plan.metrics
    assert 2 <= plan.first_look == tok_s.first_look <= 6 and verify.first_look == 1
    assert plan.max_runs == 10  # the scenario's cap: the runner time allows 11
    assert "output_tok_s's approved launches scatter" in plan.describe()
    # At 3% it would need more runs than eleven: the plan says so and stays within the cap.
    tight = plan_runs(baseline, {**tolerances, "output_tok_s": 0.03}, GATED, alpha=0.2,
                      beta=0.2, max_runs=20, budget_runs=11)  # fmt: skip
    assert tight.short == ("output_tok_s",) and tight.max_runs == 11
    assert "would need more runs than the 11 allowed (what the runner time allows)" in (
        tight.describe()
    )
    assert 0.03 < supported_tolerance(tok_s.run_sd or 0, 10, alpha=0.2, beta=0.2,
                                      max_runs=11) <= 0.06  # fmt: skip


def test_the_first_look_waits_until_every_noisy_metric_passes_it_together() -> None:
    # Three metrics whose launches scatter 1.5-2.2% against 3.5%: each alone would be judged
    # after at most 6 runs, but at 6 one of the three fails its first look too often.
    seeds = {"output_tok_s": 6, "speedup": 20, "decode_tok_s": 40}
    baseline = {m: runs_of(0.02, 10, seed) for m, seed in seeds.items()}
    plan = plan_runs(baseline, dict.fromkeys(seeds, 0.035), tuple(seeds), alpha=0.2, beta=0.2,
                     max_runs=10)  # fmt: skip
    alone = [m.first_look or 0 for m in plan.metrics]
    assert max(alone) == 6 and plan.first_look == 7
    widest = plan_runs({"decode_tok_s": baseline["decode_tok_s"]}, {"decode_tok_s": 0.035},
                       ("decode_tok_s",), alpha=0.2, beta=0.2, max_runs=10)  # fmt: skip
    assert widest.first_look == 6  # one metric: its own plan, as before


def test_the_first_look_judges_its_runs_at_the_first_look_s_levels() -> None:
    baseline = {m: runs_of(0.003, 5, 3) for m in GATED}
    current = {m: runs_of(0.003, 4, 4) for m in GATED}
    tolerances = dict.fromkeys(GATED, 0.03)
    planned = judge_look(baseline, current, tolerances, GATED, max_runs=6, first_runs=4)
    by_run = judge_look(baseline, {m: r[:1] for m, r in current.items()}, tolerances, GATED,
                        max_runs=3)  # fmt: skip
    # Four runs at the first of three looks spend what one run at the first look spends.
    assert [v.alpha for v in planned.verdicts] == [v.alpha for v in by_run.verdicts]
    assert {(v.planned_runs, v.run_budget) for v in planned.verdicts} == {(4, 6)}


def test_a_session_measures_the_planned_runs_before_it_judges(tmp_path: Path) -> None:
    # Approved launches 1.5% apart, against a 3% tolerance: one run rarely settles it.
    baseline = baseline_of([noisy(seed, shift_sd=0.015) for seed in range(10)])
    measurer = QueuedMeasurer(*(noisy(50 + i, shift_sd=0.0) for i in range(12)))
    scenario = replace(load_config(write_config(tmp_path)).scenarios["tiny"], max_runs=3)
    run = ScenarioRun(scenario, tmp_path, measurer)
    verdicts = run.judge(baseline, alpha=0.2)
    assert run.plan is not None and run.plan.first_look > 1
    # max_runs counts runs in all, not looks: 3 runs at most, however the first look is planned.
    assert run.plan.max_runs == 3 and len(run.measurements()) <= 3
    assert len(run.measurements()) >= run.plan.first_look
    assert len(run.looks) == len(run.measurements())  # each run has its look's verdicts
    assert run.looks[0] == run.looks[run.plan.first_look - 1]
    v = verdicts[0]
    assert v.planned_runs == run.plan.first_look and v.run_budget == run.plan.max_runs
    assert v.runner_s == 30.0 * len(run.measurements())  # each factory run takes 30 s
    lines = render_record(run.records(RunContext())[-1])
    assert any(
        line.startswith(f"  runs: {v.runs} in {v.runner_s:.0f} s of runner time") for line in lines
    )


def test_the_runner_time_caps_the_runs(tmp_path: Path) -> None:
    baseline = baseline_of([noisy(seed, shift_sd=0.03) for seed in range(10)])
    measurer = QueuedMeasurer(*(noisy(60 + i, shift_sd=0.0) for i in range(12)))  # 20 wanted
    config = load_config(write_config(tmp_path)).scenarios["tiny"]
    run = ScenarioRun(replace(config, max_runs=3, max_runner_s=85.0), tmp_path, measurer)
    verdicts = run.judge(baseline, alpha=0.2)
    assert run.plan is not None and run.plan.max_runs == 2  # 85 s at 30 + 10 s a run
    assert len(run.measurements()) <= 2 and verdicts[0].runner_s <= 85.0
    assert Status.INCONCLUSIVE in {v.status for v in verdicts} or len(run.measurements()) == 2


def test_decode_throughput_is_the_accept_length_over_the_cycle_and_is_recorded(
    tmp_path: Path,
) -> None:
    m = noisy(70)
    spec = replace(
        m.spec, samples={**m.spec.samples, "accept_length": (3.0, 2.0), "cycle_ms": (2.0, 4.0)}
    )
    spec = replace(spec, samples={k: v[:2] for k, v in spec.samples.items()})
    plain = replace(m.plain, samples={"output_tok_s": (100.0, 100.0)})
    m = replace(m, spec=spec, plain=plain)
    assert m.samples()["decode_tok_s"] == (1500.0, 500.0)
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with sessions.begin() as db:
        (recorded,) = record_linked(db, [RunRecord(m, RunContext(), (), Status.PASS)])
    with sessions() as db:
        loaded = load_run(db, recorded.id or 0)
    assert "decode_tok_s" not in loaded.measurement.spec.samples  # derived again, not stored twice
    assert loaded.measurement.samples()["decode_tok_s"] == (1500.0, 500.0)


def test_verify_in_plain_steps_divides_a_machines_own_speed_out(tmp_path: Path) -> None:
    m = noisy(71)

    def on(speed: float, verify_slowdown: float = 1.0) -> Measurement:
        """The run on a machine whose GPU takes `speed` times as long for everything."""
        spec = {
            **m.spec.samples,
            "verify_ms": (2.0 * speed * verify_slowdown, 2.2 * speed * verify_slowdown),
        }
        plain = {"output_tok_s": (100.0, 100.0), "cycle_ms": (1.0 * speed, 1.1 * speed)}
        return replace(
            m,
            spec=replace(m.spec, samples={k: v[:2] for k, v in spec.items()}),
            plain=replace(m.plain, samples=plain),
        )

    assert on(1.0).samples()["verify_steps"] == (2.0, 2.0)
    assert on(0.99).samples()["verify_steps"] == pytest.approx((2.0, 2.0))  # verify_ms -1%
    assert on(0.99, 1.02).samples()["verify_steps"] == pytest.approx((2.04, 2.04))
    no_plain_step = replace(on(1.0), plain=replace(m.plain, samples={"output_tok_s": (9.0, 9.0)}))
    assert "verify_steps" not in no_plain_step.samples()  # where it is not measured, absent
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with sessions.begin() as db:
        (recorded,) = record_linked(db, [RunRecord(on(0.99), RunContext(), (), Status.PASS)])
    with sessions() as db:
        loaded = load_run(db, recorded.id or 0)
    assert loaded.measurement.samples()["verify_steps"] == pytest.approx((2.0, 2.0))


def test_an_approval_derives_the_tolerances_a_scenario_leaves_unset_from_the_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As an SGLang scenario: no tolerances configured. Launches 3% apart cannot be judged
    # within 3% in the runner time, so the approval says what they allow.
    write_config(tmp_path, TINY_SCENARIO.split("[scenarios.tiny.tolerances]")[0])
    scattered = [RunRecord(noisy(s, shift_sd=0.03), RunContext(commit="c0"), (), Status.PASS)
                 for s in range(8)]  # fmt: skip
    ids = record(tmp_path, scattered)
    runs = [arg for i in ids for arg in ("--run", str(i))]
    assert cli(tmp_path, "baseline", "update", *runs, "--keep", "8", "--approved-by", "a",
               "--reason", "r") == 0  # fmt: skip
    out = capsys.readouterr().out
    document = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert document["keep"] == 8 and len(document["runs"]) == 8
    tolerance = document["tolerances"]["output_tok_s"]
    assert 0.03 < tolerance < 0.2
    assert f"output_tok_s: tolerance {tolerance:.1%}, derived from the approved runs" in out
    assert cli(tmp_path, "baseline", "update", "--run", "1", "--keep", "21", "--approved-by",
               "a", "--reason", "r") == 64  # fmt: skip
    assert "--keep: is 21" in capsys.readouterr().err
