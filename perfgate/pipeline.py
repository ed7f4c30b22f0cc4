"""Measure a scenario pair, judge it, record it: the one path from a scenario to its rows.

A scenario is measured as a pair of servers, the speculative server and then the plain twin
(never both at once), after a preflight of the machine; the plain twin, before it stops,
scores the speculative outputs that part from its own (teacher forcing). The plain twin's
figures may come from the history instead (a scenario's ``plain_max_age_h``); a plain server
is then launched only to score outputs that part. The pair is judged against its
reference (the reviewed baseline, or this machine's earlier runs) at the scenario's share of
the false-alarm level, measured again while a verdict is inconclusive, and every run is
recorded with the verdicts it led to, the earlier runs of one verdict linked.

The gate session (perfgate.session), the sweep (perfgate.sweep.run) and `perfgate gate` are
policies over this module: what to measure, when to measure again, what to print. What
measures is a :class:`Measurer`; :class:`ServerPair` launches the servers, a test passes its
own.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from perfgate.baselines import Baseline, baseline_path
from perfgate.config import Config, Scenario
from perfgate.devices import detect_gpus
from perfgate.engines.client import EngineClient
from perfgate.engines.server_commands import Mode
from perfgate.equivalence import TeacherScores
from perfgate.errors import ExitCode, InternalError, PerfgateError
from perfgate.files import check_output_file
from perfgate.gate.planning import RunPlan
from perfgate.gate.verdict import Verdict, overall_status
from perfgate.measure import (
    TimedLoop,
    WhileUp,
    assemble_measurement,
    measure_mode,
    run_rounds,
    score_differing,
    teacher_force,
)
from perfgate.measured_verdicts import judge_look, plan_verdict
from perfgate.plain_reuse import find_reusable_plain, plain_reuse_key, refresh_reason
from perfgate.preflight import (
    PASS_THROUGH,
    Preflight,
    check_scenario,
    preflight,
    require_embedded_extra_here,
)
from perfgate.progress import SILENT, Reporter
from perfgate.reference import (
    LOCAL_KEEP,
    REFERENCE_STATUSES,
    Reference,
    choose_reference,
    load_reviewed,
    requires_baseline,
)
from perfgate.results import Measurement, ModeResult, RunContext, RunRecord
from perfgate.selection import selection_from
from perfgate.spec.options import GateOptions
from perfgate.spec.slowdown import refuse_in_gating_ci
from perfgate.store import (
    comparable_runs,
    database_errors,
    record_run,
)
from perfgate.store import history as store_history
from perfgate.unrecorded import not_recorded
from perfgate.version import perfgate_version

T = TypeVar("T")

MeasureMode = Callable[..., ModeResult]  # perfgate.measure.measure_mode's signature
TeacherForce = Callable[..., TeacherScores | None]  # perfgate.measure.teacher_force
# Where reused plain figures come from: the scenario and its preflight in, a result or None.
PlainSource = Callable[[Scenario, Preflight], ModeResult | None]
# The order a run's servers are measured in, whatever asks for them first: the speculative
# server, then the plain twin, which scores the speculative outputs that part from its own
# before it stops (no plain server launched again to score them).
MEASURE_ORDER: tuple[Mode, ...] = ("spec", "plain")


def report_path(option: str | None, root: Path) -> Path | None:
    """Where a session writes its report: --report ('' writes none), else reports/index.html
    beside the config; a path that cannot be written is refused (perfgate.files)."""
    if option == "":
        return None
    path = Path(option).resolve() if option else root / "reports" / "index.html"
    return check_output_file(str(path), "--report")


class GatePlan:
    """What a gate session measures and judges against, loaded and checked up front.

    Bad input (config, scenario, baseline, a history that refuses writes, a report path that
    cannot be written) fails here, before any server starts.
    """

    def __init__(self, options: GateOptions, cwd: Path | None = None) -> None:
        self.options = options
        # The config, scenarios, runner profile and history, as every command chooses them; a
        # history that is wrong, unreachable or refuses writes fails before measuring.
        self.selection = selection_from(options, writes=True, cwd=cwd or Path.cwd())
        self.config: Config = self.selection.config
        selected = self.selection.scenarios
        self.scenarios = {s.name: s for s in selected}
        self.require_baseline = requires_baseline(options.require_baseline, os.environ)
        gating_ci = options.gate and self.require_baseline  # CI judges the code as it is
        for scenario in selected:  # refuse what SGLang would refuse, before anything starts
            check_scenario(scenario, self.config.path)
            require_embedded_extra_here(scenario, self.config.path)
            if gating_ci:
                refuse_in_gating_ci(
                    scenario.name,
                    os.environ,
                    scenario.env,
                    {key: getattr(scenario, key) for key in PASS_THROUGH},
                    file=self.config.path,
                )
        self.profile = self.selection.profile
        self.baselines_dir = self.selection.baselines_dir
        self.history_url = self.selection.history_url
        self.report_path = report_path(options.report, self.config.path.parent)
        self.baselines = self._reviewed_baselines() if options.gate else {}
        # The session's false-alarm level, split evenly among the gated scenarios (Bonferroni);
        # inside a scenario, Holm's procedure splits it among the gated metrics.
        self.alpha = self.config.alpha / max(len(self.scenarios) if options.gate else 1, 1)

    def baseline_file(self, scenario: str) -> Path:
        return baseline_path(self.baselines_dir, self.profile, scenario)

    def _reviewed_baselines(self) -> dict[str, Baseline]:
        """The reviewed baseline of each scenario that has one for this runner profile.

        A file that exists must be valid; a missing one is fine locally (the run is judged
        against this machine's history) and bad input where a reviewed baseline is required.
        """
        found = {}
        for name in self.scenarios:
            path = self.baseline_file(name)
            reviewed = load_reviewed(path, self.profile, name, required=self.require_baseline)
            if reviewed is not None:
                found[name] = reviewed
        return found

    def reference_for(self, measurement: Measurement, scenario: Scenario) -> Reference:
        """The reviewed baseline if it matches, else (locally) this machine's earlier runs."""
        return choose_reference(
            measurement,
            self.baselines.get(scenario.name),
            lambda: local_runs(self.history_url, measurement),
            scenario,
            require_baseline=self.require_baseline,
        )


class Measurer(Protocol):
    """What measures a scenario pair: :class:`ServerPair`, or a test's stand-in."""

    def measure(self, scenario: Scenario, folder: Path) -> Measurement:
        """Measure the plain twin and the speculative server, their files in `folder`."""
        ...


@dataclass
class ServerPair:
    """The Measurer that launches the servers (perfgate.measure), one at a time.

    Each server of a run folder is measured once: a caller that times one server on its own
    (the gate suites time each under pytest-benchmark) measures it through `server`, and the
    pair's `measure` then takes it as measured. The preflight runs once, before the first
    server starts. `plain_source` gives the plain twin's figures from the history where it
    may (`plain_note` says why it did not); `launch` measures one server.

    A plain twin launched after the speculative server of its folder scores the speculative
    outputs that part from its own before it stops (perfgate.measure.score_differing, after
    its timed repeats); `score` launches a plain server once more only where that did not
    happen: plain figures reused, or the plain twin measured first.
    """

    profile: str
    config_file: Path | None = None
    progress: Reporter = SILENT
    plain_source: PlainSource | None = None
    plain_note: str | None = None  # why the plain twin was measured although it may be reused
    launch: MeasureMode = measure_mode
    # Scores the speculative outputs that part from the plain ones on the plain server.
    score: TeacherForce = teacher_force
    _checked: Preflight | None = None
    _results: dict[Path, dict[Mode, ModeResult]] = field(default_factory=dict)
    _started: dict[Path, datetime] = field(default_factory=dict)
    # Per folder, the scores the plain twin gave while up: (spec outputs, plain outputs, scores).
    _live_scores: dict[Path, _LiveScores] = field(default_factory=dict)

    def checked(self, scenario: Scenario) -> Preflight:
        """The machine checks, run once before the first server starts."""
        if self._checked is None:
            self._checked = preflight(scenario, self.config_file)
            for note in self._checked.notes:
                self.progress.note(note)
        return self._checked

    def measured(self, folder: Path) -> tuple[Mode, ...]:
        """The servers measured so far into `folder`."""
        return tuple(self._results.get(folder, {}))

    def server(
        self, scenario: Scenario, mode: Mode, folder: Path, timed_loop: TimedLoop = run_rounds
    ) -> ModeResult:
        """`mode`'s result in `folder`: measured now (timed by `timed_loop`) unless it was."""
        results = self._results.setdefault(folder, {})
        self._started.setdefault(folder, datetime.now(UTC))
        if mode not in results:
            results[mode] = self._reused(scenario, mode) or self._launched(
                scenario, mode, folder, timed_loop
            )
        return results[mode]

    def measure(self, scenario: Scenario, folder: Path) -> Measurement:
        """Measure the speculative server, then the plain twin (which scores the speculative
        outputs that part from its own before it stops), and join them."""
        results = {mode: self.server(scenario, mode, folder) for mode in MEASURE_ORDER}
        spec, plain = results["spec"], results["plain"]
        started = self._started[folder]
        return assemble_measurement(
            scenario, self.profile, plain, spec, started, self.scored(scenario, plain, spec, folder)
        )

    def scored(
        self, scenario: Scenario, plain: ModeResult, spec: ModeResult, folder: Path
    ) -> TeacherScores | None:
        """The plain server's teacher-forced scores of the speculative outputs that differ:
        those the plain twin gave while up, if it scored these outputs, else `score`'s."""
        live = self._live_scores.get(folder)
        if live is not None and live.outputs == (spec.outputs, plain.outputs):
            return live.result()
        return self.score(scenario, plain, spec, folder, self.checked(scenario), self.progress)

    def _reused(self, scenario: Scenario, mode: Mode) -> ModeResult | None:
        if mode != "plain" or self.plain_source is None:
            return None
        found = self.plain_source(scenario, self.checked(scenario))
        if found is None:
            self.plain_note = "no run with the same plain fingerprint within plain_max_age_h"
        return found

    def _launched(
        self, scenario: Scenario, mode: Mode, folder: Path, timed_loop: TimedLoop
    ) -> ModeResult:
        checked = self.checked(scenario)
        spec = self._results.get(folder, {}).get("spec") if mode == "plain" else None
        result = self.launch(
            scenario,
            mode,
            folder,
            timed_loop=timed_loop,
            checked=checked,
            progress=self.progress,
            while_up=self._scorer(scenario, spec, folder) if spec is not None else None,
        )
        if mode == "plain":
            result = replace(result, reuse_key=reuse_key_for(scenario, checked))
        return result

    def _scorer(self, scenario: Scenario, spec: ModeResult, folder: Path) -> WhileUp:
        """What the plain twin does before it stops: score `spec`'s outputs that part from
        its own. A failure is kept, and raised where the scores are asked for (`scored`),
        so the plain twin's timed figures stand."""

        def score_while_up(client: EngineClient, outputs: tuple[tuple[int, ...], ...]) -> None:
            live = _LiveScores((spec.outputs, outputs))
            try:
                live.scores = score_differing(client, scenario, spec.outputs, outputs)
            except PerfgateError as error:
                live.error = error
            self._live_scores[folder] = live

        return score_while_up


@dataclass
class _LiveScores:
    """The scores a plain twin gave while up, for the (spec, plain) outputs it scored."""

    outputs: tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]
    scores: TeacherScores | None = None
    error: PerfgateError | None = None

    def result(self) -> TeacherScores | None:
        if self.error is not None:
            raise self.error
        return self.scores


def measure_scenario(
    scenario: Scenario,
    profile: str,
    workdir: Path,
    timed_loops: Mapping[Mode, TimedLoop] | None = None,
) -> Measurement:
    """Measure the speculative server, then the plain twin (never both at once; the plain
    twin scores the speculative outputs that part from its own before it stops).

    `timed_loops` runs each server's repeats (default: one after the other, see
    perfgate.measure.TimedLoop); server logs and probe files go to `workdir`.
    """
    servers, loops = ServerPair(profile), timed_loops or {}
    modes: tuple[Mode, ...] = ("spec", "plain")
    for mode in modes:
        servers.server(scenario, mode, workdir, loops.get(mode, run_rounds))
    return servers.measure(scenario, workdir)


def history_plain_source(history_url: str) -> PlainSource:
    """Plain figures from the history: a run with the same plain fingerprint, recent enough."""

    def reusable(scenario: Scenario, checked: Preflight) -> ModeResult | None:
        key = reuse_key_for(scenario, checked)
        with store_history(history_url) as sessions:
            return find_reusable_plain(sessions, scenario, key)

    return reusable


def plain_source_for(
    scenario: Scenario, history_url: str, refresh: bool, branch: str | None
) -> tuple[PlainSource | None, str | None]:
    """Where `scenario`'s plain twin may come from: the history, where its plain_max_age_h
    allows it and nothing asks for a fresh one (perfgate.plain_reuse.refresh_reason); else
    None, and why the twin is measured although the scenario allows reuse."""
    if scenario.plain_max_age_h is None:
        return None, None
    note = refresh_reason(scenario, refresh, branch)
    if note is not None:
        return None, note
    return history_plain_source(history_url), None


def reuse_key_for(scenario: Scenario, checked: Preflight) -> str:
    """The plain twin's reuse key, from what the preflight found installed."""
    engine_version = checked.engine_version or perfgate_version()  # embedded: perfgate's own
    torch_version = checked.installed.torch if checked.installed else None
    return plain_reuse_key(scenario, engine_version, torch_version, detect_gpus())


@dataclass
class ScenarioRun:
    """One scenario's runs in one session, and the verdicts judged after each.

    The first look waits for the runs the baseline's spread asks for, and while the gate
    finds a verdict inconclusive the scenario is measured again (a fresh measurement of both
    servers, into its own folder), up to the plan's runs: ``looks`` holds, per run, the
    verdicts of the look that judged it, so every run is recorded with the verdicts it led
    to. A failure to measure is remembered in ``error`` and raised again on the next
    call.
    """

    scenario: Scenario
    workdir: Path
    measurer: Measurer
    error: PerfgateError | None = None
    verdicts: list[Verdict] | None = None  # the final ones, once judged
    reference: Reference | None = None  # what the verdicts were judged against
    looks: list[list[Verdict]] = field(default_factory=list)
    plan: RunPlan | None = None  # the runs the verdict was planned to take, once judged
    _runs: list[Measurement] = field(default_factory=list)

    def remembering(self, measure: Callable[[], T]) -> T:
        """Call `measure`, unless a measurement failed already; remember its failure (an
        exception perfgate did not expect as an InternalError)."""
        if self.error is not None:
            raise self.error
        try:
            return measure()
        except PerfgateError as error:
            self.error = error
            raise
        except Exception as error:  # a bug: its own code, its traceback said with it once
            where = f"measuring scenario {self.scenario.name!r}"
            self.error = InternalError(where, error, detail=traceback.format_exc().rstrip())
            raise self.error from error

    def measurement(self) -> Measurement:
        """The first run, measured now unless it was."""
        if not self._runs:
            first = self.remembering(lambda: self.measurer.measure(self.scenario, self.workdir))
            self._runs.append(first)
        return self._runs[0]

    def measurements(self) -> list[Measurement]:
        """Every run of this scenario so far: the first, then those measured again."""
        self.measurement()
        return list(self._runs)

    @property
    def reruns(self) -> list[Measurement]:
        """The runs measured again, after the first."""
        return self._runs[1:]

    def measure_again(self) -> Measurement:
        """Measure both servers afresh, once more, into a folder of the run's own (after the
        first run, measured now unless it was)."""
        self.measurement()
        folder = self.workdir / f"run-{len(self._runs) + 1}"
        measurement = self.measurer.measure(self.scenario, folder)
        self._runs.append(measurement)
        return measurement

    def judge(self, baseline: Baseline, alpha: float, max_runs: int | None = None) -> list[Verdict]:
        """Judge against ``baseline``, measuring again while another run can change the outcome.

        The first look waits for the runs the baseline's spread asks for (perfgate.gate.
        planning: ``plan``, within the scenario's ``max_runner_s`` at what the first run
        took); each look after it judges as many more, and says whether to measure them
        (perfgate.gate.looks): only
        while runs are left, no metric is a regression already, and some inconclusive
        metric could still be settled. A run that fails while measuring again ends the loop:
        the verdicts so far stand (inconclusive, or judged on the runs measured) and the
        failure is kept in ``error``. ``max_runs`` overrides the scenario's.
        """
        budget = self.scenario.max_runs if max_runs is None else max_runs
        self.plan = plan_verdict(
            self.measurement(),
            baseline,
            alpha=alpha,
            max_runs=budget,
            budget_s=self.scenario.max_runner_s,
        )
        while len(self._runs) < self.plan.first_look and self._again():
            pass
        first = min(self.plan.first_look, len(self._runs))
        while True:
            look = judge_look(
                self.measurements(),
                baseline,
                alpha=alpha,
                max_runs=self.plan.max_runs,
                first_runs=first,
            )
            # Every run is recorded with the verdicts of the look that judged it: the first
            # look's runs with the first look's.
            self.looks += [look.verdicts] * (len(self._runs) - len(self.looks))
            if not look.another_run:
                return look.verdicts
            while len(self._runs) < look.next_runs:
                if not self._again():
                    return look.verdicts

    def _again(self) -> bool:
        """Measure once more; False (the failure kept in ``error``) if that fails."""
        try:
            self.measure_again()
        except PerfgateError as error:
            self.error = error
            return False
        return True

    def judge_against(self, reference: Reference, alpha: float) -> list[Verdict]:
        """Judge against `reference` at `alpha`: its baseline's verdicts (measuring again
        within the reference's run budget), or the verdicts it decided without judging."""
        self.reference = reference
        if reference.baseline is not None:
            budget = reference.run_budget(self.scenario.max_runs)
            self.verdicts = self.judge(reference.baseline, alpha, budget)
        else:
            self.verdicts = list(reference.verdicts)
            self.looks.append(self.verdicts)
        return self.verdicts

    def leave_unjudged(self, why: str) -> list[Verdict]:
        """Judge nothing: the runs are recorded without verdicts, `why` said instead."""
        self.reference, self.verdicts = Reference(why), []
        return self.verdicts

    def records(self, context: RunContext) -> list[RunRecord]:
        """One record per measured run, each with the verdicts judged after it."""
        records = []
        for index, measurement in enumerate(self.measurements()):
            verdicts = tuple(self.looks[index]) if index < len(self.looks) else ()
            status = overall_status(verdicts, measurement.outputs_pass)
            against = self.reference.description if self.reference else None
            records.append(
                RunRecord(measurement, context, verdicts, status, judged_against=against)
            )
        return records


def local_runs(
    url: str, measurement: Measurement, before: int | None = None, *, existing: bool = False
) -> list[RunRecord]:
    """This machine's earlier runs that may judge `measurement` (same scenario, profile and
    fingerprint, a reference status), recorded before run `before` if given, in the history at
    `url` (with `existing`, one that must exist already; see perfgate.store.history)."""
    with store_history(url, existing=existing) as sessions, sessions() as session:
        return comparable_runs(
            session,
            measurement.scenario,
            measurement.profile,
            measurement.fingerprint,
            LOCAL_KEEP,
            statuses=[s.value for s in REFERENCE_STATUSES],
            before=before,
        )


def record_linked(session: Session, records: list[RunRecord]) -> list[RunRecord]:
    """Record runs in order; each run's verdicts name the earlier runs judged with it."""
    recorded: list[RunRecord] = []
    earlier: dict[str, list[int]] = {}
    for record in records:
        ids = earlier.setdefault(record.measurement.scenario, [])
        verdicts = tuple(replace(v, with_runs=tuple(ids)) for v in record.verdicts)
        linked = replace(record, verdicts=verdicts)
        run_id = record_run(session, linked)
        ids.append(run_id)
        recorded.append(replace(linked, id=run_id))
    return recorded


def record_runs(
    history: str | sessionmaker[Session], records: list[RunRecord], root: Path, name: str
) -> list[RunRecord]:
    """Record `records` in one transaction, linked (see record_linked), and return them with
    their ids; if that fails, keep them in `<root>/.perfgate/unrecorded/<name>.jsonl` and
    raise the error that says where (perfgate.unrecorded).

    `history` is the history's URL (opened and closed here) or an open one.
    """
    try:
        if isinstance(history, str):
            with store_history(history, writing=True) as sessions, sessions.begin() as session:
                return record_linked(session, records)
        with database_errors(history, writing=True), history.begin() as session:
            return record_linked(session, records)
    except PerfgateError as error:
        raise not_recorded(error, root, name, records) from None


def unjudged_record(measurement: Measurement, context: RunContext) -> RunRecord:
    """The record of a run judged against nothing (a sweep's point)."""
    return RunRecord(measurement, context, (), overall_status((), measurement.outputs_pass))


def severest(codes: Iterable[ExitCode]) -> ExitCode:
    """The code that says the most: a bug in perfgate (whatever else the run found cannot be
    trusted), bad input, infrastructure, regression, inconclusive, pass."""
    order = [
        ExitCode.PASS,
        ExitCode.INCONCLUSIVE,
        ExitCode.REGRESSION,
        ExitCode.INFRASTRUCTURE,
        ExitCode.BAD_INPUT,
        ExitCode.INTERNAL,
    ]
    return max(codes, key=order.index, default=ExitCode.PASS)


def final_records(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Each scenario's last run: the one whose verdicts are final."""
    last = {r.measurement.scenario: r for r in records}
    return list(last.values())
