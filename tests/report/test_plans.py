"""The report's plans: each prediction beside what was measured at the same chain."""

from __future__ import annotations

from typing import Any

import pytest

from perfgate.report.plans import find_plans
from perfgate.report.sweeps import SweepRun

BASE = {"model": "m", "repeats": 5, "topk": 1}


def run(run_id: int, steps: int, tok_s: float, profile: str = "cpu", **extra: Any) -> SweepRun:
    config = {**BASE, "steps": steps, "draft_tokens": steps + 1, **extra}
    return SweepRun(run_id, "x", profile, config, tok_s, 100.0, 2.0)


def predicted(steps: int, tok_s: float) -> dict[str, Any]:
    return {"steps": steps, "output_tok_s": [tok_s, tok_s * 0.9, tok_s * 1.1]}


PROFILED = {
    "role": "profiled",
    "steps": 4,
    "best": 2,
    "predicted": [
        predicted(1, 110.0),
        predicted(2, 130.0),
        predicted(3, 120.0),
        predicted(4, 90.0),
    ],
}


def test_each_step_count_shows_the_plan_s_own_run_else_another_of_the_same_config() -> None:
    runs = [
        run(1, 2, 120.0, sweep="x-sweep"),  # a sweep's point, before the plan
        # `perfgate sweep` records each point's place in its batch, which differs per point.
        run(2, 3, 118.0, sweep="x-sweep", sweep_run={"batch": "b", "point": 2, "points": 6}),
        run(3, 1, 999.0, repeats=3, sweep="other"),  # another config: never compared
        run(4, 1, 999.0, profile="gpu", sweep="x-sweep"),  # another profile
        run(5, 4, 90.0, sweep="x-plan", plan=PROFILED),
        run(
            6,
            2,
            125.0,
            sweep="x-plan",
            plan={"role": "confirm", "profiled_run": 5, "error": {"output_tok_s": 0.04}},
        ),
    ]
    (plan,) = find_plans(runs)
    assert (plan.name, plan.profile, plan.run_id, plan.steps_run, plan.best) == (
        "x-plan",
        "cpu",
        5,
        4,
        2,
    )
    rows = {r.steps: r for r in plan.rows}
    assert (rows[1].measured, rows[1].source) == (None, "")
    assert (rows[2].run_id, rows[2].source, rows[2].error) == (6, "confirmed", 0.04)
    assert (rows[3].run_id, rows[3].source) == (2, "measured")
    assert rows[3].error == pytest.approx(120.0 / 118.0 - 1)
    assert (rows[4].run_id, rows[4].source) == (5, "profiled")
    assert rows[2].predicted == (130.0, 117.0, 143.0)


def test_a_refused_plan_and_plain_sweeps_show_no_plan() -> None:
    refused = {"role": "profiled", "steps": 4, "refused": "no acceptance depths"}
    assert find_plans([run(1, 4, 90.0, plan=refused), run(2, 2, 100.0, sweep="s")]) == []


def test_only_a_plan_s_newest_profiled_run_is_shown() -> None:
    newer = {**PROFILED, "best": 1}
    plans = find_plans(
        [run(1, 4, 90.0, sweep="p", plan=PROFILED), run(2, 4, 91.0, sweep="p", plan=newer)]
    )
    assert [(p.run_id, p.best) for p in plans] == [(2, 1)]
