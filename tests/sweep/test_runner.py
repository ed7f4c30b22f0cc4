"""The sweep's driver over a stand-in for the servers: what it measures, skips and records.

The servers are replaced by `FakeServers` (tok/s as a function of the point), the rest is
real: the preflight, the equivalence check, the history (SQLite) and the report's grouping.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import Scenario, load_config
from perfgate.errors import ExitCode, InfrastructureError
from perfgate.progress import Reporter
from perfgate.report.chart_data import sweeps_of
from perfgate.results import Measurement, ModeResult, RunContext
from perfgate.store import close_history, history_columns, list_runs, open_history
from perfgate.sweep.grid import Point, SweepSpec
from perfgate.sweep.render import render_markdown, sweep_json
from perfgate.sweep.results import SweepResult
from perfgate.sweep.run import SweepRunner

from ..conftest import FakeStream, write_config
from ..factories import mode_result

Curve = Callable[[Scenario], float]


class FakeServers:
    """Answers measure_mode's calls with results whose tok/s follow `curve`."""

    def __init__(self, curve: Curve, fail: Callable[[Scenario, str], bool] | None = None) -> None:
        self.curve = curve
        self.fail = fail or (lambda scenario, mode: False)
        self.calls: list[tuple[str, int, dict[str, str]]] = []
        self.reporters: list[object] = []  # where each server's start and repeats are shown

    def __call__(self, scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        self.calls.append((mode, scenario.steps, dict(scenario.env)))
        self.reporters.append(kwargs.get("progress"))
        if self.fail(scenario, mode):
            raise InfrastructureError(f"the {mode} server exited")
        tok_s = 100.0 if mode == "plain" else self.curve(scenario)
        result = mode_result(mode, tok_s, repeats=scenario.repeats)
        return replace(result, samples={**result.samples, "output_tok_s": _repeats(tok_s)})


def _repeats(tok_s: float) -> tuple[float, ...]:
    return tuple(tok_s * f for f in (0.998, 1.0, 1.002, 0.999, 1.001))


def peak_at_3(scenario: Scenario) -> float:
    return {1: 110.0, 2: 125.0, 3: 140.0, 4: 120.0, 5: 110.0, 6: 100.0}[scenario.steps]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def run_sweep(project: Path, servers: FakeServers, **changes: Any) -> tuple[SweepResult, list[str]]:
    config = load_config(project)
    spec = SweepSpec("tiny-steps", "tiny", steps=(1, 2, 3, 4, 5, 6), repeats=5)
    spec = replace(spec, **{k: v for k, v in changes.items() if k in ("steps", "env")})
    stream = FakeStream(tty=False)
    # The tiny scenario's 60% tok/s tolerance suits a noisy CPU; these curves are clean.
    base = replace(
        config.scenarios["tiny"],
        tolerances={"output_tok_s": 0.03},
        plain_max_age_h=changes.get("plain_max_age_h"),
    )
    runner = SweepRunner(
        spec=spec,
        base=base,
        profile="cpu",
        history_url=config.history_url,
        workdir=project.parent / "work",
        context=RunContext(commit="abc", branch="feature"),
        config_file=project,
        early_stop=changes.get("early_stop", True),
        budget_s=changes.get("budget_s"),
        measure=servers,
        progress=Reporter(stream),
        refresh_plain=changes.get("refresh_plain", False),
    )
    return runner.run(), stream.getvalue().splitlines()


def recorded(project: Path) -> list[Any]:
    sessions = open_history(load_config(project).history_url)
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


def test_the_plain_twin_is_measured_once_per_environment_point(project: Path) -> None:
    servers = FakeServers(peak_at_3)
    env = {"NCCL_PROTO": ("LL", "Simple")}
    result, _ = run_sweep(project, servers, steps=(1, 2), env=env)
    assert [c[0] for c in servers.calls] == ["plain", "spec", "spec"] * 2
    assert [c[2] for c in servers.calls if c[0] == "plain"] == [
        {"NCCL_PROTO": "LL"},
        {"NCCL_PROTO": "Simple"},
    ]
    runs = recorded(project)
    assert [r.measurement.scenario for r in runs] == ["tiny-steps"] * 4
    assert [r.measurement.plain.reused_from for r in runs] == [None, runs[0].id, None, runs[2].id]
    assert [r.measurement.config["sweep"] for r in runs] == ["tiny-steps · NCCL_PROTO=LL"] * 2 + [
        "tiny-steps · NCCL_PROTO=Simple"
    ] * 2
    assert all(r.verdicts == () and r.status.value == "pass" for r in runs)
    assert result.exit_code() is ExitCode.PASS


def test_a_plain_twin_in_the_history_is_reused_where_plain_max_age_h_allows(
    project: Path,
) -> None:
    first = FakeServers(peak_at_3)
    run_sweep(project, first, steps=(1, 2))
    earlier = recorded(project)[0].id
    again = FakeServers(peak_at_3)
    result, lines = run_sweep(project, again, steps=(1, 2), plain_max_age_h=24.0)
    assert [c[0] for c in again.calls] == ["spec", "spec"]  # no plain server launched
    runs = recorded(project)[2:]
    assert [r.measurement.plain.reused_from for r in runs] == [earlier, earlier]
    assert result.plain_reused == {"tiny-steps": earlier}
    assert f"reused from run {earlier} (plain_max_age_h)" in render_markdown(result)
    assert sweep_json(result)["plain_reused_from"] == {"tiny-steps": earlier}
    assert list(sweep_json(result)["plain_s"]) == ["tiny-steps"]  # the reuse's own seconds
    assert any(
        f"plain twin (tiny-steps): 100.0 tok/s, reused from run {earlier}" in x for x in lines
    )
    # --refresh-plain measures it all the same, and says nothing was reused.
    fresh = FakeServers(peak_at_3)
    result, _ = run_sweep(project, fresh, steps=(1,), plain_max_age_h=24.0, refresh_plain=True)
    assert [c[0] for c in fresh.calls] == ["plain", "spec"]
    assert result.plain_reused == {}
    assert recorded(project)[-1].measurement.plain.reused_from is None


def test_without_plain_max_age_h_every_sweep_measures_its_plain_twin(project: Path) -> None:
    run_sweep(project, FakeServers(peak_at_3), steps=(1,))
    servers = FakeServers(peak_at_3)
    result, _ = run_sweep(project, servers, steps=(1,))
    assert [c[0] for c in servers.calls] == ["plain", "spec"]
    assert result.plain_reused == {}


def test_the_report_groups_the_points_by_environment(project: Path) -> None:
    run_sweep(project, FakeServers(peak_at_3), steps=(1, 2, 3), env={"NCCL_ALGO": ("Ring", "Tree")})
    sessions = open_history(load_config(project).history_url)
    try:
        with sessions() as session:
            sweeps = sweeps_of(history_columns(session))
    finally:
        close_history(sessions)
    assert [s.name for s in sweeps] == [
        "tiny-steps · NCCL_ALGO=Ring",
        "tiny-steps · NCCL_ALGO=Tree",
    ]
    assert [p.steps for p in sweeps[0].points] == [1, 2, 3]
    assert sweeps[0].points[2].speedup == pytest.approx(1.4, rel=0.01)


def test_a_branch_stops_after_two_clearly_worse_points(project: Path) -> None:
    servers = FakeServers(peak_at_3)
    result, lines = run_sweep(project, servers)
    assert [c[1] for c in servers.calls if c[0] == "spec"] == [1, 2, 3, 4, 5]
    assert [p.clearly_worse for p in result.points[:5]] == [False, False, False, True, True]
    assert result.points[5].skipped == "early stop: the branch is past its best"
    assert result.stops == ("topk=1: past its best after steps=5; 1 later point(s) skipped",)
    best = result.best()
    assert best is not None and best.point.steps == 3
    assert len(recorded(project)) == 5
    assert lines[0].startswith("plain twin (tiny-steps): 100.0 tok/s")
    assert lines[3].startswith("[3/6] steps=3 topk=1 draft_tokens=4: 140.0 tok/s (1.40x plain)")
    assert (
        lines[-1]
        == "[6/6] steps=6 topk=1 draft_tokens=7: skipped (early stop: the branch is past its best)"
    )


def test_every_server_shows_its_progress_on_the_sweeps_reporter(project: Path) -> None:
    servers = FakeServers(peak_at_3)
    run_sweep(project, servers, steps=(1, 2))
    first = servers.reporters[0]
    assert isinstance(first, Reporter) and first.stream is not None  # the runner's, not SILENT
    assert servers.reporters == [first] * 3


def test_without_early_stop_every_point_runs_and_the_rule_is_still_told(project: Path) -> None:
    servers = FakeServers(peak_at_3)
    result, _ = run_sweep(project, servers, early_stop=False)
    assert len([c for c in servers.calls if c[0] == "spec"]) == 6
    assert result.stops == (
        "topk=1: past its best after steps=5; 1 later point(s) would have been skipped "
        "(--no-early-stop)",
    )


def test_a_failed_point_is_skipped_and_fails_the_sweep(project: Path) -> None:
    servers = FakeServers(peak_at_3, fail=lambda s, mode: mode == "spec" and s.steps == 2)
    result, _ = run_sweep(project, servers, steps=(1, 2, 3))
    assert [p.measured for p in result.points] == [True, False, True]
    assert result.points[1].skipped == "failed: the spec server exited"
    assert result.exit_code() is ExitCode.INFRASTRUCTURE
    assert "Failed: steps=2 topk=1 draft_tokens=3: the spec server exited" in render_markdown(
        result
    )


def test_a_failed_plain_twin_skips_its_environment_point(project: Path) -> None:
    servers = FakeServers(peak_at_3, fail=lambda s, mode: mode == "plain" and s.env.get("A") == "1")
    result, _ = run_sweep(project, servers, steps=(1, 2), env={"A": ("1", "2")})
    assert [p.skipped for p in result.points] == ["the plain twin failed"] * 2 + [None, None]
    assert result.exit_code() is ExitCode.INFRASTRUCTURE


def test_an_inequivalent_point_is_never_best(project: Path) -> None:
    def wrong_at_3(scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        result = FakeServers(peak_at_3)(scenario, mode, folder)
        return replace(result, outputs=((9, 9, 9), (4, 5, 6))) if scenario.steps == 3 else result

    result, _ = run_sweep(project, wrong_at_3, steps=(1, 2, 3))  # type: ignore[arg-type]
    assert [p.equivalent for p in result.points] == [True, True, False]
    best = result.best()
    assert best is not None and best.point.steps == 2
    assert result.exit_code() is ExitCode.REGRESSION
    assert recorded(project)[2].status.value == "regression"
    table = render_markdown(result)
    assert "| 2 | 1 | 3 | 125.0 | 1.25x |" in table and "| **no** | #3 |" in table
    assert (
        "Best: steps=2 topk=1 draft_tokens=3: 125.0 tok/s (1.25x plain), accept length 2.50 (run #2)."
        in table
    )


def test_past_the_budget_nothing_more_starts(project: Path) -> None:
    servers = FakeServers(peak_at_3)
    result, _ = run_sweep(project, servers, budget_s=1e-9)
    assert servers.calls == []
    assert {p.skipped for p in result.points} == {"over the 0 s budget"}
    assert result.exit_code() is ExitCode.INCONCLUSIVE


def test_the_json_holds_every_point_without_nan(project: Path) -> None:
    result, _ = run_sweep(project, FakeServers(peak_at_3), steps=(1, 2, 3))
    document = sweep_json(result)
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text)["best"]["steps"] == 3
    assert [p["run"] for p in document["points"]] == [1, 2, 3]
    point = document["points"][2]
    assert point["output_tok_s"] == pytest.approx(140.0)
    assert point["verify_share"] == pytest.approx(5.0 / 6.5)
    assert not math.isnan(point["accept_length"])


def test_more_points_measured_after_the_grid_reuse_its_plain_twin_and_carry_annotations(
    project: Path,
) -> None:
    """What a policy over the sweep (perfgate plan) relies on: `extend` and `annotate`."""
    config = load_config(project)
    servers = FakeServers(peak_at_3)
    seen: list[tuple[int, float]] = []

    def annotate(point: Point, measurement: Measurement) -> dict[str, Any]:
        seen.append((point.steps, measurement.spec.samples["output_tok_s"][1]))
        return {"plan": {"steps": point.steps}}

    runner = SweepRunner(
        spec=SweepSpec("tiny-plan", "tiny", steps=(6,), repeats=5),
        base=config.scenarios["tiny"],
        profile="cpu",
        history_url=config.history_url,
        workdir=project.parent / "work",
        context=RunContext(),
        config_file=project,
        measure=servers,
        annotate=annotate,
    )
    runner.run()
    result = runner.extend([Point((), 3, 1, 4), Point((), 2, 1, 3)])
    assert [c[:2] for c in servers.calls] == [("plain", 6), ("spec", 6), ("spec", 3), ("spec", 2)]
    assert [p.point.steps for p in result.points] == [6, 3, 2]
    assert result.best() is not None and result.best().point.steps == 3
    assert seen == [(6, 100.0), (3, 140.0), (2, 125.0)]
    runs = recorded(project)
    assert [r.measurement.config["plan"] for r in runs] == [{"steps": s} for s in (6, 3, 2)]
    assert [r.measurement.config["sweep"] for r in runs] == ["tiny-plan"] * 3
    assert [r.measurement.plain.reused_from for r in runs] == [None, runs[0].id, runs[0].id]
