"""Sweeps: runs of one setup at several steps/topk/draft-token settings, one point each."""

from __future__ import annotations

from typing import Any

from perfgate.report.sweeps import SweepRun, find_sweeps


def sweep_run(
    run_id: int, profile: str = "h200x8", tok_s: float = 100.0, **config: Any
) -> SweepRun:
    base = {"model": "llama", "tp": 8, "steps": 2, "topk": 1, "draft_tokens": 3}
    return SweepRun(run_id, f"s{run_id}", profile, {**base, **config}, tok_s, 90.0, 2.0)


def test_runs_differing_only_in_speculative_knobs_form_one_sweep_newest_run_per_setting() -> None:
    runs = [
        sweep_run(1, steps=3, draft_tokens=4, tok_s=95.0),
        sweep_run(2, steps=10, draft_tokens=11),  # ordered numerically, not as text
        sweep_run(3, steps=2),
        sweep_run(4, steps=3, draft_tokens=4, tok_s=97.0),  # newer run of a setting
        sweep_run(5, model="other", steps=5),  # another setup: alone, so no sweep
        sweep_run(6, profile="cpu", steps=4),  # another profile: alone too
    ]
    (sweep,) = find_sweeps(runs)
    assert sweep.profile == "h200x8"
    assert [(p.steps, p.draft_tokens, p.run.run_id, p.runs) for p in sweep.points] == [
        (2, 3, 3, 1),
        (3, 4, 4, 2),
        (10, 11, 2, 1),
    ]
    assert sweep.points[1].speedup == 97.0 / 90.0


def test_a_named_sweep_groups_by_its_name_whatever_else_differs() -> None:
    runs = [
        sweep_run(1, sweep="nccl-steps", steps=1, env={"NCCL_ALGO": "Ring"}),
        sweep_run(2, sweep="nccl-steps", steps=2, env={"NCCL_ALGO": "Tree"}),
        sweep_run(3, steps=3),
    ]
    (sweep,) = find_sweeps(runs)
    assert sweep.name == "nccl-steps"
    assert [p.run.run_id for p in sweep.points] == [1, 2]


def test_one_setting_is_no_sweep() -> None:
    assert find_sweeps([sweep_run(1), sweep_run(2), sweep_run(3)]) == []


def test_missing_figures_give_no_speedup() -> None:
    run = SweepRun(1, "s", "cpu", {"steps": 1}, None, 90.0, None)
    other = SweepRun(2, "s", "cpu", {"steps": 2}, 100.0, 0.0, 2.0)
    points = find_sweeps([run, other])[0].points
    assert [p.speedup for p in points] == [None, None]
