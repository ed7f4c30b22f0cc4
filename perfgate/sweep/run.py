"""Measure a sweep: the plain twin once per environment point, then every speculative point.

Each point is measured and recorded the way a gate run is (perfgate.pipeline): the
speculative server launched with the probe, its outputs checked against the plain twin's, the
run recorded in the history in its own transaction as soon as it is measured, without
verdicts (a sweep judges no baseline). The plain twin does not depend on
steps, topk or draft tokens, so it is measured once per environment point and its figures
are reused for every speculative point under it: the first point's run records it as
measured, the others as reused from that run.

The runs are recorded under the sweep's name as their scenario, so they never mix with the
gate's own runs of the scenario (its trends, or "latest" in the baseline update), and with a
``sweep`` entry in their config naming the sweep and the environment point, which is what
the report groups a sweep's points by (perfgate.report.sweeps). A runner given a shard
measures only that shard's share of the points (perfgate.sweep.shards) and, given a batch,
records each point with its place in the batch, so that ``perfgate sweep --collect`` can
gather the shards' points again.

A policy over the sweep (`perfgate plan`) adds entries of its own to each point's recorded
config (`annotate`), and measures more points once the grid is done (`extend`), each under
its environment point's plain twin.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from perfgate.config import Scenario
from perfgate.errors import PerfgateError
from perfgate.gate.judge import DEFAULT_TOLERANCE
from perfgate.measure import assemble_measurement, measure_mode
from perfgate.pipeline import (
    MeasureMode,
    ServerPair,
    plain_source_for,
    record_runs,
    unjudged_record,
)
from perfgate.preflight import check_scenario
from perfgate.progress import SILENT, Reporter
from perfgate.results import Measurement, ModeResult, RunContext
from perfgate.store import history
from perfgate.sweep.grid import EnvPoint, Point, SweepSpec, grid
from perfgate.sweep.results import PointResult, SweepResult, median_tok_s
from perfgate.sweep.shards import SWEEP_RUN, Shard, numbered_points, run_entry
from perfgate.sweep.stop import BranchTracker

# Entries a policy over the sweep adds to a point's recorded config, from its measurement.
Annotate = Callable[[Point, Measurement], Mapping[str, Any]]


def point_scenario(base: Scenario, spec: SweepSpec, point: Point) -> Scenario:
    """The scenario one point runs: the base scenario at the point's settings and env."""
    return replace(
        base,
        name=spec.name,
        steps=point.steps,
        topk=point.topk,
        draft_tokens=point.draft_tokens,
        env={**base.env, **dict(point.env)},
        repeats=spec.repeats or base.repeats,
    )


def sweep_label(spec: SweepSpec, env: EnvPoint) -> str:
    """The `sweep` entry of a point's recorded config: the sweep, and its environment point."""
    settings = " ".join(f"{k}={v}" for k, v in env)
    return f"{spec.name} · {settings}" if settings else spec.name


def check_points(base: Scenario, spec: SweepSpec, file: Path | None) -> int:
    """Refuse, before any server starts, a point SGLang would refuse; return the point count."""
    count = 0
    for _env, branches in grid(spec):
        for branch in branches:
            for point in branch:
                check_scenario(point_scenario(base, spec, point), file)
                count += 1
    return count


@dataclass
class _EnvState:
    """One environment point being measured: its servers (one preflight for all its points),
    its plain twin and the run that recorded it."""

    label: str
    servers: ServerPair
    plain: ModeResult | None = None
    skip: str | None = None  # why none of its points can be measured
    plain_run: int | None = None
    plain_s: float = 0.0  # the runner seconds its plain twin took (reused: the lookup's)


@dataclass
class SweepRunner:
    """One sweep, measured and recorded point by point, with a progress line per point.

    `progress` gets a line per point and per plain twin, and shows each server's start and
    repeats as they go. `annotate`, if given, adds entries to each point's recorded config.
    """

    spec: SweepSpec
    base: Scenario
    profile: str
    history_url: str
    workdir: Path
    context: RunContext
    config_file: Path | None = None
    early_stop: bool = True
    budget_s: float | None = None
    measure: MeasureMode = measure_mode
    progress: Reporter = SILENT
    shard: Shard = field(default_factory=Shard)  # the share of the grid to measure
    batch: str | None = None  # recorded with each point, so that its shards can be collected
    annotate: Annotate | None = None
    refresh_plain: bool = False  # measure every plain twin, whatever plain_max_age_h allows
    _started: float = field(default_factory=time.monotonic)
    _numbers: dict[Point, int] = field(default_factory=dict)
    _total: int = 0
    _points: list[PointResult] = field(default_factory=list)
    _plain: dict[str, float] = field(default_factory=dict)
    _stops: list[str] = field(default_factory=list)
    _failures: list[str] = field(default_factory=list)
    _states: dict[EnvPoint, _EnvState] = field(default_factory=dict)

    def run(self) -> SweepResult:
        """Measure every point of this shard's share, or skip it (early stop, budget, a failed
        plain twin). An environment point with none of the share's points is not launched."""
        check_points(self.base, self.spec, self.config_file)
        self._numbers = {point: k for k, point in enumerate(numbered_points(self.spec))}
        self._total = sum(1 for k in self._numbers.values() if self.shard.holds(k))
        self._started = time.monotonic()
        with history(self.history_url) as sessions:
            for env, branches in grid(self.spec):
                mine = [[p for p in b if self.shard.holds(self._numbers[p])] for b in branches]
                mine = [branch for branch in mine if branch]
                if not mine:
                    continue
                state = self._plain_twin(env, mine[0][0])
                self._states[env] = state
                for branch in mine:
                    self._branch(sessions, state, branch)
        return self.result()

    def extend(self, points: Sequence[Point]) -> SweepResult:
        """Measure `points` too, after `run`: each under its environment point's plain twin
        (measured now where `run` measured none), none skipped by the early-stop rule; the
        budget still holds. Return the whole sweep so far."""
        for point in points:
            check_scenario(point_scenario(self.base, self.spec, point), self.config_file)
        self._total += len(points)
        tolerance = self.base.tolerances.get("output_tok_s", DEFAULT_TOLERANCE)
        with history(self.history_url) as sessions:
            for point in points:
                state = self._states.get(point.env)
                if state is None:
                    state = self._states[point.env] = self._plain_twin(point.env, point)
                skip = state.skip or (self._budget_note() if self._over_budget() else None)
                if skip:
                    self._add(PointResult(point, state.label, skipped=skip))
                else:
                    self._measure_point(sessions, state, point, BranchTracker(tolerance))
        return self.result()

    def result(self) -> SweepResult:
        """The sweep as measured so far."""
        return SweepResult(
            spec=self.spec,
            scenario=self.base.name,
            points=tuple(self._points),
            plain=dict(self._plain),
            plain_reused={
                s.label: s.plain.reused_from
                for s in self._states.values()
                if s.plain is not None and s.plain.reused_from is not None
            },
            plain_s={s.label: s.plain_s for s in self._states.values() if s.plain is not None},
            stops=tuple(self._stops),
            failures=tuple(self._failures),
        )

    def _plain_twin(self, env: EnvPoint, first: Point) -> _EnvState:
        scenario = point_scenario(self.base, self.spec, first)
        # No main-branch refresh: the gate's runs on main keep the history's plain twins fresh.
        source, why_measured = plain_source_for(
            scenario, self.history_url, self.refresh_plain, branch=None
        )
        servers = ServerPair(
            self.profile,
            self.config_file,
            self.progress,
            plain_source=source,
            plain_note=why_measured,
            launch=self.measure,
        )
        state = _EnvState(sweep_label(self.spec, env), servers)
        if self._over_budget():
            state.skip = self._budget_note()
            return state
        clock = time.monotonic()
        try:
            plain = servers.server(scenario, "plain", self._folder(state.label))
        except PerfgateError as error:
            self._failures.append(f"plain twin ({state.label}): {error}")
            self.progress.note(f"plain twin ({state.label}): failed: {error}")
            state.skip = "the plain twin failed"
            return state
        state.plain, state.plain_run = plain, plain.reused_from
        self._plain[state.label] = median_tok_s(plain)
        took = state.plain_s = time.monotonic() - clock
        if plain.reused_from is not None:
            how = f"reused from run {plain.reused_from} (plain_max_age_h)"
        else:
            how = f"{took:.0f} s" + (f" ({servers.plain_note})" if servers.plain_note else "")
        self.progress.note(
            f"plain twin ({state.label}): {self._plain[state.label]:.1f} tok/s, {how}"
        )
        return state

    def _branch(
        self, sessions: sessionmaker[Session], state: _EnvState, branch: list[Point]
    ) -> None:
        tolerance = self.base.tolerances.get("output_tok_s", DEFAULT_TOLERANCE)
        tracker = BranchTracker(tolerance)
        for point in branch:
            skip = state.skip or self._skip_reason(tracker)
            if skip:
                self._add(PointResult(point, state.label, skipped=skip))
            else:
                self._measure_point(sessions, state, point, tracker)
        if tracker.stop_index is not None:
            self._stops.append(self._stop_note(branch, tracker.stop_index))

    def _measure_point(
        self,
        sessions: sessionmaker[Session],
        state: _EnvState,
        point: Point,
        tracker: BranchTracker,
    ) -> None:
        assert state.plain is not None
        scenario = point_scenario(self.base, self.spec, point)
        started, clock = datetime.now(UTC), time.monotonic()
        folder = self._folder(state.label, point)
        try:
            spec = state.servers.server(scenario, "spec", folder)
        except PerfgateError as error:
            self._failures.append(f"{point.label()}: {error}")
            self._add(PointResult(point, state.label, skipped=f"failed: {error}"))
            return
        plain = state.plain
        if state.plain_run is not None:
            plain = replace(plain, reused_from=state.plain_run)
        try:
            teacher = state.servers.scored(scenario, plain, spec, folder)
        except PerfgateError as error:
            self._failures.append(f"{point.label()}: teacher forcing: {error}")
            teacher = None
        measurement = assemble_measurement(scenario, self.profile, plain, spec, started, teacher)
        extra = self.annotate(point, measurement) if self.annotate is not None else {}
        config = {**measurement.config, "sweep": state.label, **extra}
        if self.batch is not None:
            number, total = self._numbers[point], len(self._numbers)
            config[SWEEP_RUN] = run_entry(
                self.batch, self.shard, number, total, self.spec, self.base.name
            )
        measurement = replace(measurement, config=config)
        run_id = self._record(sessions, measurement)
        state.plain_run = state.plain_run or run_id
        tok_s = measurement.spec.samples.get("output_tok_s", ())
        worse = tracker.observe(tok_s, measurement.outputs_pass)
        self._add(PointResult(point, state.label, run_id, measurement, clearly_worse=worse), clock)

    def _record(self, sessions: sessionmaker[Session], measurement: Measurement) -> int:
        """Record one point's run in its own transaction, as soon as it is measured."""
        root = self.config_file.parent if self.config_file else Path.cwd()
        name = f"{self.workdir.parent.name}-{self.workdir.name}"
        record = unjudged_record(measurement, self.context)
        (recorded,) = record_runs(sessions, [record], root, name)
        assert recorded.id is not None
        return recorded.id

    def _skip_reason(self, tracker: BranchTracker) -> str | None:
        if self.early_stop and tracker.stopped:
            return "early stop: the branch is past its best"
        return self._budget_note() if self._over_budget() else None

    def _over_budget(self) -> bool:
        return self.budget_s is not None and time.monotonic() - self._started > self.budget_s

    def _budget_note(self) -> str:
        return f"over the {self.budget_s:.0f} s budget"

    def _add(self, result: PointResult, clock: float | None = None) -> None:
        self._points.append(result)
        took = f", {time.monotonic() - clock:.0f} s" if clock is not None else ""
        self.progress.note(f"[{len(self._points)}/{self._total}] {result.describe()}{took}")

    def _stop_note(self, branch: list[Point], index: int) -> str:
        point, rest = branch[index], len(branch) - index - 1
        where = f"topk={point.topk}" + (
            f" draft_tokens={point.draft_tokens}" if point.topk > 1 else ""
        )
        where += "".join(f" {k}={v}" for k, v in point.env)
        done = "skipped" if self.early_stop else "would have been skipped (--no-early-stop)"
        return f"{where}: past its best after steps={point.steps}; {rest} later point(s) {done}"

    def _folder(self, label: str, point: Point | None = None) -> Path:
        """Where one server's log and probe files go: a folder per server."""
        name = f"plain {label.partition(' · ')[2]}" if point is None else point.label()
        return self.workdir / re.sub(r"[^A-Za-z0-9_.-]+", "_", name.strip().replace("=", "-"))
