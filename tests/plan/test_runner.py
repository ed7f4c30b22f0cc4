"""The plan's driver over stand-in servers: one profiled launch, the confirmations, the
history. The servers are `PlanServers` (tok/s as a function of the steps, probe records made
up for the profiled server); the rest is real: the sweep's runner, the model, SQLite."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import Scenario, load_config
from perfgate.errors import ExitCode
from perfgate.measure import run_rounds
from perfgate.plan.forecast import Forecast, Observation
from perfgate.plan.render import plan_json, render_markdown
from perfgate.plan.results import PlanResult, PlanSpec
from perfgate.plan.run import PlanRunner
from perfgate.probe.reader import CycleRecord
from perfgate.results import ModeResult, PhaseSummary, RunContext

from ..conftest import REPO, write_config
from ..factories import mode_result
from ..sweep.test_runner import recorded
from .test_forecast import FEW

# Two sequences: one accepts two drafts a cycle, the other one, whatever the chain's length.
DEPTHS = ((2, 1), (2, 1))


OUTPUTS = (tuple(range(24)), tuple(range(24)))  # the tiny scenario's 24 new tokens each


def curve(steps: int) -> float:
    return {1: 600.0, 2: 700.0, 3: 680.0, 4: 650.0, 5: 620.0, 6: 560.0}[steps]


class PlanServers:
    """Answers measure_mode's calls; the profiled server's probe records carry `depths`
    (one cycle per pair, as (row 0, row 1)), or no depths at all."""

    def __init__(
        self,
        depths: tuple[tuple[int, int], ...] | None = DEPTHS,
        verify: dict[int, float] | None = None,
    ) -> None:
        self.depths = depths
        self.verify = verify or {}  # verify's ms at these steps, instead of 5
        self.calls: list[tuple[str, int]] = []

    def __call__(
        self,
        scenario: Scenario,
        mode: str,
        folder: Path,
        timed_loop: Callable[..., None] = run_rounds,
        checked: Any = None,
        **options: Any,
    ) -> ModeResult:
        self.calls.append((mode, scenario.steps))
        moments: list[float] = []
        timed_loop(lambda: moments.append(time.time()), scenario.repeats)
        tok_s = 500.0 if mode == "plain" else curve(scenario.steps)
        result = mode_result(mode, tok_s, repeats=scenario.repeats)
        result = replace(result, log_path=str(folder / f"server-{mode}.log"), outputs=OUTPUTS)
        if mode == "plain":
            step = tuple(PhaseSummary("plain", "cycle", r, 20, 4.0, 4.0, 4.0) for r in range(3))
            result = replace(result, phases=step)
        else:  # each repeat's phases, as the probe's records below make them
            result = replace(result, phases=self._phases(scenario.steps, scenario.repeats))
        if options.get("on_records") is not None:
            options["on_records"](self._records(moments, scenario.steps))
        return result

    def _ms(self, steps: int) -> dict[str, float]:
        """A cycle's phases: verify flat in the chain's tokens, above the plain step's 4 ms."""
        ms = {"draft": 0.2 * (steps - 1), "verify": self.verify.get(steps, 5.0), "accept": 0.1}
        return {**ms, "draft_extend": 0.4, "cycle": sum(ms.values()) + 0.4 + 0.1}

    def _phases(self, steps: int, repeats: int) -> tuple[PhaseSummary, ...]:
        return tuple(
            PhaseSummary("spec", phase, r, 10, ms, ms, ms)
            for r in range(repeats)
            for phase, ms in self._ms(steps).items()
        )

    def _records(self, moments: list[float], steps: int) -> list[CycleRecord]:
        found = []
        for moment in moments:
            for index in range(10):
                ms = self._ms(steps)
                depths = self.depths[index % len(self.depths)] if self.depths else ()
                rows = (0, 1) if depths else ()
                found.append(CycleRecord("cycle", 1, index, moment, ms, 1, 0, depths, rows))
        return found


class FewReplicates(Forecast):
    """The runner's forecasts at FEW bootstrap replicates by default, not 1000: these tests
    read the predictions' values, the same at any count (each is the observation's own draw,
    tests/plan/test_forecast.py), and that an interval holds its value, true at any count."""

    @classmethod
    def of(cls, observation: Observation, seed: int = 0, replicates: int = FEW) -> Forecast:
        return Forecast.of(observation, seed, replicates)


@pytest.fixture(autouse=True)
def few_replicates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("perfgate.plan.run.Forecast", FewReplicates)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def run_plan(project: Path, servers: PlanServers, **changes: Any) -> PlanResult:
    config = load_config(project)
    spec = replace(PlanSpec("tiny-plan", "tiny", steps=6, repeats=3), **changes)
    runner = PlanRunner(
        spec=spec,
        base=config.scenarios["tiny"],
        profile="cpu",
        history_url=config.history_url,
        workdir=project.parent / "work",
        context=RunContext(commit="abc"),
        config_file=project,
        measure=servers,
    )
    return runner.run()


def test_one_profiled_launch_then_the_two_fastest_predicted_are_measured(project: Path) -> None:
    servers = PlanServers()
    result = run_plan(project, servers)
    (plan,) = result.plans
    assert plan.prediction is not None and plan.refused is None
    ranked = [p.steps for p in plan.prediction.ranked()]
    # Acceptance stops growing past two drafts: the shortest chains that hold them win.
    assert ranked[0] == 2
    # Verify costs what the run timed at every width, so the refit on the first confirmation
    # ranks as the prediction did: the next is its runner-up.
    expected = [2, ranked[1]]
    assert servers.calls == [("plain", 6), ("spec", 6), *(("spec", k) for k in expected)]
    assert [c.predicted.steps for c in result.confirmed] == expected
    # The first by the prediction; the next by the refit on the first's measured costs.
    assert [c.chosen_by for c in result.confirmed] == ["the prediction", "the refit"]
    runs = recorded(project)
    assert [r.measurement.scenario for r in runs] == ["tiny-plan"] * (1 + len(expected))
    profiled = runs[0].measurement.config["plan"]
    assert profiled["role"] == "profiled" and profiled["steps"] == 6
    assert [p["steps"] for p in profiled["predicted"]] == [1, 2, 3, 4, 5, 6]
    assert profiled["best"] == 2
    low, value, high = sorted(profiled["predicted"][1]["output_tok_s"])
    assert profiled["predicted"][1]["output_tok_s"][0] == value and low <= value <= high
    for run, steps in zip(runs[1:], expected, strict=True):
        entry = run.measurement.config["plan"]
        assert (entry["role"], entry["steps"], entry["profiled_run"]) == (
            "confirm",
            steps,
            runs[0].id,
        )
        predicted = entry["predicted"]["output_tok_s"][0]
        assert entry["error"]["output_tok_s"] == pytest.approx(
            predicted / (curve(steps) * 1.01) - 1
        )  # the median repeat
        assert run.measurement.plain.reused_from == runs[0].id  # one plain twin for all
    assert result.exit_code() is ExitCode.PASS


def test_the_table_and_json_show_predicted_against_measured(project: Path) -> None:
    result = run_plan(project, PlanServers(), confirm=1)
    text = render_markdown(result)
    assert "| steps | tok/s | speedup | accept length | cycle ms |" in text
    assert "| **2** |" in text and "| 6 |" in text and "profiled | #1 |" in text
    assert "Predicted best: steps=2: " in text
    assert "Confirmed steps=2 (chosen by the prediction): measured 707.0 tok/s against " in text
    assert "Best measured: steps=2 topk=1 draft_tokens=3: 707.0 tok/s" in text
    assert "Runner time: " in text
    document = plan_json(result)
    assert document["predicted_best"]["steps"] == 2
    assert [c["steps"] for c in document["confirmed"]] == [2]
    assert document["confirmed"][0]["measured"]["output_tok_s"] == pytest.approx(707.0)
    assert document["exit_code"] == 0


def test_the_confirmed_step_counts_refit_the_prediction(project: Path) -> None:
    """Verify costs 5 ms whatever the chain, 1 ms above the plain step: the first prediction's
    line through the plain step says less at short chains; the confirmation at 2 steps puts
    every step count's verify back at 5 ms, and the table and JSON show the refit."""
    result = run_plan(project, PlanServers(), confirm=1)
    (plan,) = result.plans
    assert plan.prediction is not None and plan.refit is not None
    assert plan.prediction.at(3)["verify_ms"].value < 4.9
    assert [p["verify_ms"].value for p in plan.refit.points] == pytest.approx([5.0] * 6)
    assert plan.refit.at(4)["cycle_ms"].value == pytest.approx(PlanServers()._ms(4)["cycle"])
    text = render_markdown(result)
    assert "Refit: each phase's cost on its line through the step counts measured (2, 6)" in text
    (entry,) = plan_json(result)["plans"]
    assert [p["steps"] for p in entry["refit"]] == [1, 2, 3, 4, 5, 6]
    assert entry["refit_best"] == plan.refit.best().steps
    assert run_plan(project, PlanServers(), confirm=0).plans[0].refit is None


def test_a_confirmation_that_finds_the_prediction_wrong_steers_the_next(project: Path) -> None:
    """Verify measures 9 ms at 2 steps, not the 5 the run at 6 timed: the first prediction's
    runner-up (3 steps) is no longer the next to measure; the refit through 2 and 6 makes
    short chains dearer, so 5 steps, the fastest it has not measured, is."""
    servers = PlanServers(verify={2: 9.0})
    result = run_plan(project, servers)
    (plan,) = result.plans
    assert plan.prediction is not None and [p.steps for p in plan.prediction.ranked()][:2] == [2, 3]
    assert [(c.predicted.steps, c.chosen_by) for c in result.confirmed] == [
        (2, "the prediction"),
        (5, "the refit"),
    ]
    assert servers.calls == [("plain", 6), ("spec", 6), ("spec", 2), ("spec", 5)]
    text = render_markdown(result)
    assert "Confirmed steps=5 (chosen by the refit): measured " in text
    assert [c["chosen_by"] for c in plan_json(result)["confirmed"]] == [
        "the prediction",
        "the refit",
    ]


def test_confirm_0_measures_nothing_more(project: Path) -> None:
    servers = PlanServers()
    result = run_plan(project, servers, confirm=0)
    assert servers.calls == [("plain", 6), ("spec", 6)] and result.confirmed == ()


def test_a_run_without_depths_is_recorded_and_refused(project: Path) -> None:
    servers = PlanServers(depths=None)
    result = run_plan(project, servers)
    assert servers.calls == [("plain", 6), ("spec", 6)]  # nothing to confirm
    (plan,) = result.plans
    assert plan.prediction is None and "no acceptance depths" in (plan.refused or "")
    (run,) = recorded(project)
    assert run.measurement.config["plan"]["refused"] == plan.refused
    assert result.exit_code() is ExitCode.BAD_INPUT
    assert "Refused: " in render_markdown(result)


def test_the_report_shows_the_plan_against_its_confirmations(project: Path) -> None:
    from perfgate.report import render_history_report
    from perfgate.store import close_history, open_history

    result = run_plan(project, PlanServers(), confirm=1)
    sessions = open_history(load_config(project).history_url)
    try:
        with sessions() as session:
            page = render_history_report(session)
    finally:
        close_history(sessions)
    (confirmed,) = result.confirmed
    error = 100 * (confirmed.predicted["output_tok_s"].value / 707.0 - 1)
    assert "Plans: predicted against measured" in page
    assert 'tiny-plan <span class="muted">on cpu, profiled at steps=6 (run #1)' in page
    assert f"{error:+.1f}%</td>\n<td>#2 (confirmed)" in page
    assert "profiled</td>\n<td>#1 (profiled)" in page


def test_an_environment_axis_costs_one_profiled_run_per_setting(project: Path) -> None:
    servers = PlanServers()
    result = run_plan(project, servers, env={"NCCL_PROTO": ("LL", "Simple")}, confirm=2)
    profiled = [c for c in servers.calls if c == ("spec", 6)]
    assert len(profiled) == 2 and servers.calls.count(("plain", 6)) == 2
    assert [p.label for p in result.plans] == [
        "tiny-plan · NCCL_PROTO=LL",
        "tiny-plan · NCCL_PROTO=Simple",
    ]
    # The two fastest predicted points over both settings, each under its own plain twin.
    assert len(result.confirmed) == 2
    assert len(servers.calls) == 6
    runs = recorded(project)
    by_label = {r.measurement.config["sweep"]: r.id for r in runs[:2]}
    for run in runs[2:]:
        entry = run.measurement.config["plan"]
        assert entry["profiled_run"] == by_label[run.measurement.config["sweep"]]


@pytest.mark.parametrize(("measured_tok_s", "noted"), [(1.0, True), (1e9, False)])
def test_a_refit_that_puts_an_unmeasured_step_count_first_says_to_measure_it(
    measured_tok_s: float, noted: bool
) -> None:
    from perfgate.plan.forecast import predict
    from perfgate.plan.render import _refit_lines
    from perfgate.plan.results import EnvPlan
    from perfgate.sweep.grid import Point
    from perfgate.sweep.results import PointResult

    from ..factories import measurement
    from .test_forecast import cpu_like, measured_at

    refit = predict(cpu_like(), replicates=20, measured=measured_at(1, 2))
    profiled = PointResult(Point((), 6, 1, 7), "p", 1, measurement(spec_tok_s=measured_tok_s))
    plan = EnvPlan("p", (), profiled, refit, refit=refit)
    lines = _refit_lines(plan, {6: profiled}, "tiny")
    best = refit.best().steps
    note = f"Note: the refit puts steps={best} ahead"
    assert any(note in line for line in lines) is noted
    if noted:
        assert f"(`perfgate sweep --scenario tiny --steps {best}`)." in lines[-1]


def test_only_a_chain_on_one_rank_after_a_warm_up_times_a_second_verify_width() -> None:
    """The profiled server is asked to time its verify at 2 tokens where the embedded engine
    can (a chain, one rank) and the timing cannot fall in a timed repeat (a warm-up batch
    comes first); everywhere else the plan keeps the plain step's line."""
    from perfgate.plan.launch import times_verify_widths

    base = load_config(REPO / "perfgate.toml").scenarios["embedded-default"]
    assert times_verify_widths(base)
    assert not times_verify_widths(replace(base, topk=2, draft_tokens=4))
    assert not times_verify_widths(replace(base, tp=2))
    assert not times_verify_widths(replace(base, warmup=0))
    assert not times_verify_widths(replace(base, engine="sglang"))
