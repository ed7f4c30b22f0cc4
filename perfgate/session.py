"""One gate session: measure the selected scenarios, judge them, record them, report.

The pytest plugin holds one of these per pytest session; `perfgate run` drives the same
code by running the suites.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session

from perfgate.baselines import Baseline, baseline_path
from perfgate.config import (
    Config,
    Scenario,
    check_history_name,
    load_config,
)
from perfgate.context import detect_context
from perfgate.engines.commands import Mode
from perfgate.engines.validate import Preflight, check_scenario, preflight
from perfgate.errors import ConfigError, ExitCode, PerfgateError
from perfgate.fingerprint import default_profile, detect_gpus, perfgate_version
from perfgate.folders import session_folder
from perfgate.gate.verdict import Verdict, exit_code, overall_status
from perfgate.judging import judge_look
from perfgate.measure import (
    TimedLoop,
    assemble_measurement,
    measure_mode,
    plain_loop,
)
from perfgate.plain_reuse import find_reusable_plain, plain_reuse_key, refresh_reason
from perfgate.progress import SILENT, Reporter
from perfgate.reference import (
    LOCAL_KEEP,
    REFERENCE_STATUSES,
    Reference,
    choose_reference,
    load_reviewed,
    requires_baseline,
)
from perfgate.report import write_history_report
from perfgate.results import Measurement, ModeResult, RunContext, RunRecord
from perfgate.store import (
    comparable_runs,
    history,
    probe_write,
    record_run,
    resolve_history_url,
)
from perfgate.unrecorded import not_recorded


@dataclass(frozen=True)
class GateOptions:
    """The knobs shared by `perfgate run` (`--NAME`) and pytest (`--perfgate-NAME`)."""

    config: str | None = None
    scenarios: tuple[str, ...] = ()
    engine: str | None = None
    db: str | None = None
    baselines: str | None = None
    profile: str | None = None
    report: str | None = None  # "" writes no report
    gate: bool = True  # False: measure and record, judge nothing (to make a first baseline)
    refresh_plain: bool = False  # measure the plain twin even where the history has one
    require_baseline: bool = False  # only a matching reviewed baseline judges (CI=true too)


@dataclass
class ScenarioRun:
    """One scenario in one session, measured one server at a time, each server once.

    While the gate finds a verdict inconclusive the scenario is measured again (a fresh
    launch of both servers), up to the scenario's ``max_runs``: ``reruns`` holds those runs
    and ``looks`` the verdicts after each run, so every run is recorded with the verdicts it
    led to.
    """

    scenario: Scenario
    profile: str
    workdir: Path
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    results: dict[str, ModeResult] = field(default_factory=dict)
    error: PerfgateError | None = None
    verdicts: list[Verdict] | None = None
    reruns: list[Measurement] = field(default_factory=list)
    looks: list[list[Verdict]] = field(default_factory=list)
    # Where reused plain figures come from (None: always measure), and why not, if not.
    plain_source: Callable[[Scenario, Preflight], ModeResult | None] | None = None
    plain_note: str | None = None  # why the plain twin was measured although it may be reused
    config_file: Path | None = None
    reference: Reference | None = None  # what the verdicts were judged against
    progress: Reporter = SILENT  # the servers' start and the repeats, as they go
    _checked: Preflight | None = None
    _measurement: Measurement | None = None

    def mode_result(self, mode: Mode, timed_loop: TimedLoop = plain_loop) -> ModeResult:
        """Measure `mode` now unless it was measured already; a failure is remembered."""
        if self.error is not None:
            raise self.error
        if mode not in self.results:
            try:
                self.results[mode] = self._reused(mode) or self._measure(mode, timed_loop)
            except PerfgateError as error:
                self.error = error
                raise
        return self.results[mode]

    def checked(self) -> Preflight:
        """The machine checks, run once before the first server starts."""
        if self._checked is None:
            self._checked = preflight(self.scenario, self.config_file)
            for note in self._checked.notes:
                self.progress.note(note)
        return self._checked

    def _reused(self, mode: Mode) -> ModeResult | None:
        if mode != "plain" or self.plain_source is None:
            return None
        found = self.plain_source(self.scenario, self.checked())
        if found is None:
            self.plain_note = "no run with the same plain fingerprint within plain_max_age_h"
        return found

    def _measure(
        self, mode: Mode, timed_loop: TimedLoop, workdir: Path | None = None
    ) -> ModeResult:
        checked = self.checked()
        result = measure_mode(
            self.scenario,
            mode,
            workdir or self.workdir,
            timed_loop,
            checked,
            progress=self.progress,
        )
        if mode == "plain":
            result = replace(result, reuse_key=reuse_key_for(self.scenario, checked))
        return result

    def measurement(self) -> Measurement:
        if self._measurement is None:
            plain, spec = self.mode_result("plain"), self.mode_result("spec")
            self._measurement = assemble_measurement(
                self.scenario, self.profile, plain, spec, self.started_at
            )
        return self._measurement

    def measurements(self) -> list[Measurement]:
        """Every run of this scenario so far: the first, then those measured again."""
        return [self.measurement(), *self.reruns]

    def measure_again(self) -> Measurement:
        """Launch both servers afresh and measure once more (untimed by pytest-benchmark)."""
        measurement = self._fresh_measurement(self.workdir / f"run-{len(self.reruns) + 2}")
        self.reruns.append(measurement)
        return measurement

    def _fresh_measurement(self, folder: Path) -> Measurement:
        started = datetime.now(UTC)
        plain = self._reused("plain") or self._measure("plain", plain_loop, folder)
        spec = self._measure("spec", plain_loop, folder)
        return assemble_measurement(self.scenario, self.profile, plain, spec, started)

    def judge(self, baseline: Baseline, alpha: float, max_runs: int | None = None) -> list[Verdict]:
        """Judge against ``baseline``, measuring again while another run can change the outcome.

        Each look says whether to measure again (perfgate.gate.looks): only while runs are
        left of ``max_runs``, no metric is a regression already, and some inconclusive
        metric could still be settled. A run that fails while measuring again ends the loop:
        the verdicts so far stand (inconclusive) and the failure is kept in ``error``.
        ``max_runs`` overrides the scenario's budget.
        """
        budget = self.scenario.max_runs if max_runs is None else max_runs
        while True:
            look = judge_look(self.measurements(), baseline, alpha=alpha, max_runs=budget)
            self.looks.append(look.verdicts)
            if not look.another_run:
                return look.verdicts
            try:
                self.measure_again()
            except PerfgateError as error:
                self.error = error
                return look.verdicts

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


class GateSession:
    """Loads config and baselines up front, so bad input fails before any server starts."""

    def __init__(
        self, options: GateOptions, cwd: Path | None = None, progress: Reporter = SILENT
    ) -> None:
        self.options = options
        self.progress = progress
        self.cwd = cwd or Path.cwd()
        self.config: Config = load_config(options.config)
        selected = self.config.select(options.scenarios)
        if options.engine:
            selected = [s.with_engine(options.engine) for s in selected]
        self.scenarios = {s.name: s for s in selected}
        for scenario in selected:  # refuse what SGLang would refuse, before anything starts
            check_scenario(scenario, self.config.path)
        self.profile = options.profile or default_profile(detect_gpus())
        check_history_name(self.profile, field="runner profile (--profile, PERFGATE_PROFILE)")
        self.baselines_dir = (
            Path(options.baselines).resolve() if options.baselines else self.config.baselines_dir
        )
        # options.db holds $PERFGATE_DB_URL already, where the caller read it.
        self.history_url = resolve_history_url(
            options.db, cwd=self.cwd, environ={}, config=self.config
        )
        # A history that is wrong, unreachable or refuses writes fails before measuring.
        probe_write(self.history_url)
        self.require_baseline = requires_baseline(options.require_baseline, os.environ)
        self.baselines = self._reviewed_baselines() if options.gate else {}
        # The session's false-alarm level, split evenly among the gated scenarios (Bonferroni);
        # inside a scenario, Holm's procedure splits it among the gated metrics.
        self.alpha = self.config.alpha / max(len(self.scenarios) if options.gate else 1, 1)
        self.report_path = _report_path(options.report, self.config.path.parent)
        self.started_at = datetime.now(UTC)
        self.runs: dict[str, ScenarioRun] = {}
        self.records: list[RunRecord] = []
        self.report_written = False
        self.exit_code = ExitCode.PASS

    @functools.cached_property
    def workdir(self) -> Path:
        """The session's own folder for server logs and probe files, made on first use."""
        return session_folder(self.config.path.parent, self.started_at)

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

    def run_for(self, name: str) -> ScenarioRun:
        if name not in self.runs:
            run = ScenarioRun(
                self.scenarios[name],
                self.profile,
                self.workdir / name,
                config_file=self.config.path,
                progress=self.progress,
            )
            run.plain_source = self._plain_source(run)
            self.runs[name] = run
        return self.runs[name]

    def _plain_source(self, run: ScenarioRun) -> Callable[..., ModeResult | None] | None:
        if run.scenario.plain_max_age_h is None:
            return None
        branch = detect_context(self.config.path.parent).branch
        run.plain_note = refresh_reason(run.scenario, self.options.refresh_plain, branch)
        if run.plain_note is not None:
            return None

        def reusable(scenario: Scenario, checked: Preflight) -> ModeResult | None:
            key = reuse_key_for(scenario, checked)
            with history(self.history_url) as sessions:
                return find_reusable_plain(sessions, scenario, key)

        return reusable

    def verdicts(self, name: str) -> list[Verdict]:
        """Judge the scenario against its reference (once; later calls reuse the verdicts).

        Inconclusive verdicts make the scenario measure again, up to its ``max_runs``.
        """
        run = self.run_for(name)
        if run.verdicts is None:
            if not self.options.gate:
                run.reference, run.verdicts = Reference(NOT_JUDGED), []
                return run.verdicts
            run.reference = self.reference_for(run)
            baseline = run.reference.baseline
            if baseline is not None:
                budget = run.reference.run_budget(run.scenario.max_runs)
                run.verdicts = run.judge(baseline, self.alpha, budget)
            else:
                run.verdicts = list(run.reference.verdicts)
                run.looks.append(run.verdicts)
        return run.verdicts

    def failing_verdicts(self, name: str) -> list[Verdict]:
        """The scenario's verdicts that fail the run (see Reference.blocks)."""
        verdicts = self.verdicts(name)
        reference = self.run_for(name).reference
        return [v for v in verdicts if reference is None or reference.blocks(v)]

    def reference_for(self, run: ScenarioRun) -> Reference:
        """The reviewed baseline if it matches, else (locally) this machine's earlier runs."""
        measurement = run.measurement()
        return choose_reference(
            measurement,
            self.baselines.get(run.scenario.name),
            lambda: local_runs(self.history_url, measurement),
            run.scenario,
            require_baseline=self.require_baseline,
        )

    def finish(self) -> ExitCode:
        """Record every measured run in one transaction, write the report, return the code.

        The code follows each scenario's last run (its verdicts are the final ones) and any
        run whose outputs were not equivalent.
        """
        context = detect_context(self.config.path.parent, clean_paths=[self.baselines_dir])
        for name, run in self.runs.items():
            if len(run.results) == 2:
                if run.error is None:
                    self.verdicts(name)
                self.records += run.records(context)
        failure = None
        try:
            if self.records:
                self._record()
                self._report()
        except PerfgateError as error:
            failure = error
        errors = [run.error for run in self.runs.values() if run.error is not None]
        codes = [e.exit_code for e in errors] + [self._code(r) for r in self.final_records()]
        if any(not r.measurement.outputs_pass for r in self.records):
            codes.append(ExitCode.REGRESSION)
        if failure is not None:
            codes.append(failure.exit_code)
        self.exit_code = severest(codes)
        if failure is not None:
            raise failure
        return self.exit_code

    def _code(self, record: RunRecord) -> ExitCode:
        """A final record's exit code; locally, an inconclusive verdict fails nothing."""
        run = self.runs.get(record.measurement.scenario)
        reference = run.reference if run else None
        return reference.exit_code(record.status) if reference else exit_code(record.status)

    def final_records(self) -> list[RunRecord]:
        """Each scenario's last recorded run: the one whose verdicts are final."""
        last = {r.measurement.scenario: r for r in self.records}
        return list(last.values())

    def _record(self) -> None:
        """Record every run in one transaction; if that fails, keep them in a file and say so."""
        try:
            with history(self.history_url, writing=True) as sessions, sessions.begin() as session:
                self.records = record_linked(session, self.records)
        except PerfgateError as error:
            raise not_recorded(
                error, self.config.path.parent, self.workdir.name, self.records
            ) from None

    def _report(self) -> None:
        """Write the history's report, if the session writes one (the runs are recorded)."""
        if self.report_path is None:
            return
        try:
            with history(self.history_url) as sessions, sessions() as session:
                write_history_report(self.report_path, session)
        except OSError as error:
            raise ConfigError(
                f"cannot be written ({error.strerror}); the runs are recorded",
                file=self.report_path,
                fix="make its folder writable, or pass --report PATH, then run `perfgate report`",
            ) from None
        self.report_written = True


NOT_JUDGED = "not judged (--no-gate): recorded only"


def local_runs(
    url: str, measurement: Measurement, before: int | None = None, *, existing: bool = False
) -> list[RunRecord]:
    """This machine's earlier runs that may judge `measurement` (same scenario, profile and
    fingerprint, a reference status), recorded before run `before` if given, in the history at
    `url` (with `existing`, one that must exist already; see perfgate.store.history)."""
    with history(url, existing=existing) as sessions, sessions() as session:
        return comparable_runs(
            session,
            measurement.scenario,
            measurement.profile,
            measurement.fingerprint,
            LOCAL_KEEP,
            statuses=[s.value for s in REFERENCE_STATUSES],
            before=before,
        )


def reuse_key_for(scenario: Scenario, checked: Preflight) -> str:
    """The plain twin's reuse key, from what the preflight found installed."""
    engine_version = checked.engine_version or perfgate_version()  # embedded: perfgate's own
    torch_version = checked.installed.torch if checked.installed else None
    return plain_reuse_key(scenario, engine_version, torch_version, detect_gpus())


def _report_path(option: str | None, root: Path) -> Path | None:
    if option == "":
        return None
    return Path(option).resolve() if option else root / "reports" / "index.html"


def severest(codes: Iterable[ExitCode]) -> ExitCode:
    """The code that says the most: bad input, infrastructure, regression, inconclusive, pass."""
    order = [
        ExitCode.PASS,
        ExitCode.INCONCLUSIVE,
        ExitCode.REGRESSION,
        ExitCode.INFRASTRUCTURE,
        ExitCode.BAD_INPUT,
    ]
    return max(codes, key=order.index, default=ExitCode.PASS)


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
