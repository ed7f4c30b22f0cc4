"""One gate session: measure the selected scenarios, judge them, record them, report.

The pytest plugin holds one of these per pytest session; `perfgate run` drives the same
code by running the suites. The path itself (measure a pair, judge, record) is
perfgate.pipeline's; the session decides what to measure (the selected scenarios, each
server timed in its own test), when (as the suites ask), and what to write at the end.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path

from perfgate.context import detect_context
from perfgate.engines.server_commands import Mode
from perfgate.errors import ConfigError, ExitCode, InternalError, PerfgateError
from perfgate.folders import session_folder
from perfgate.gate.verdict import Verdict
from perfgate.measure import TimedLoop, run_rounds
from perfgate.pipeline import (
    MEASURE_ORDER,
    GatePlan,
    PlainSource,
    ScenarioRun,
    ServerPair,
    final_records,
    plain_source_for,
    record_runs,
    severest,
)
from perfgate.progress import SILENT, Reporter
from perfgate.reference import status_exit_code
from perfgate.report import write_history_report
from perfgate.results import ModeResult, RunRecord
from perfgate.spec.options import GateOptions
from perfgate.store import history

NOT_JUDGED = "not judged (--no-gate): recorded only"


class GateSession:
    """A gate session over its plan (perfgate.pipeline.GatePlan, loaded up front, so bad input
    fails before any server starts): each scenario's runs, then the records and the report."""

    def __init__(
        self,
        options: GateOptions,
        cwd: Path | None = None,
        progress: Reporter = SILENT,
        plan: GatePlan | None = None,
    ) -> None:
        # `perfgate run` hands over the plan it built and checked; pytest alone builds it here.
        self.plan = plan if plan is not None else GatePlan(options, cwd)
        self.options = options
        self.progress = progress
        self.config = self.plan.config
        self.scenarios = self.plan.scenarios
        self.profile = self.plan.profile
        self.history_url = self.plan.history_url
        self.report_path = self.plan.report_path
        self.started_at = datetime.now(UTC)
        self.runs: dict[str, ScenarioRun] = {}
        self.servers: dict[str, ServerPair] = {}  # each scenario's measurer
        self.records: list[RunRecord] = []
        self.report_written = False
        self.exit_code = ExitCode.PASS
        self.internal_errors: list[InternalError] = []  # a test's unexpected exceptions

    @functools.cached_property
    def workdir(self) -> Path:
        """The session's own folder for server logs and probe files, made on first use."""
        return session_folder(self.config.path.parent, self.started_at)

    def run_for(self, name: str) -> ScenarioRun:
        """The scenario's runs; its servers start when a test first needs them."""
        if name not in self.runs:
            scenario = self.scenarios[name]
            source, note = self._plain_source(name)
            servers = ServerPair(
                self.profile,
                self.config.path,
                self.progress,
                plain_source=source,
                plain_note=note,
            )
            self.servers[name] = servers
            self.runs[name] = ScenarioRun(scenario, self.workdir / name, servers)
        return self.runs[name]

    def _plain_source(self, name: str) -> tuple[PlainSource | None, str | None]:
        """Where the plain twin's figures may come from, or why they are measured."""
        scenario = self.scenarios[name]
        if scenario.plain_max_age_h is None:
            return None, None
        branch = detect_context(self.config.path.parent).branch
        return plain_source_for(scenario, self.history_url, self.options.refresh_plain, branch)

    def server_result(
        self, name: str, mode: Mode, timed_loop: TimedLoop = run_rounds
    ) -> ModeResult:
        """The first run's `mode` server: measured now, timed by `timed_loop`, unless it was.

        The servers before it in MEASURE_ORDER are measured first (by the default loop), so
        the order is the plan's, not the one a test asks in."""
        run = self.run_for(name)
        servers = self.servers[name]
        for earlier in MEASURE_ORDER[: MEASURE_ORDER.index(mode)]:
            run.remembering(lambda: servers.server(run.scenario, earlier, run.workdir))  # noqa: B023
        return run.remembering(lambda: servers.server(run.scenario, mode, run.workdir, timed_loop))

    def measured(self, name: str, mode: Mode) -> bool:
        """Whether the first run's `mode` server was measured already."""
        run = self.run_for(name)
        return mode in self.servers[name].measured(run.workdir)

    def measure_and_judge(self, name: str) -> list[Verdict]:
        """Measure the scenario (unless its tests did) and judge it against its reference,
        once; later calls give the same verdicts.

        Inconclusive verdicts make the scenario measure again, up to its ``max_runs``.
        """
        run = self.run_for(name)
        if run.verdicts is not None:
            return run.verdicts
        if not self.options.gate:
            return run.leave_unjudged(NOT_JUDGED)
        reference = self.plan.reference_for(run.measurement(), run.scenario)
        return run.judge_against(reference, self.plan.alpha)

    def failing_verdicts(self, name: str) -> list[Verdict]:
        """The scenario's verdicts that fail the run (see Reference.blocks)."""
        verdicts = self.measure_and_judge(name)
        reference = self.run_for(name).reference
        return [v for v in verdicts if reference is None or reference.blocks(v)]

    def finish(self) -> ExitCode:
        """Record every measured run in one transaction, write the report, return the code.

        The code follows each scenario's last run (its verdicts are the final ones) and any
        run whose outputs were not equivalent.
        """
        context = detect_context(self.config.path.parent, clean_paths=[self.plan.baselines_dir])
        for name, run in self.runs.items():
            if set(self.servers[name].measured(run.workdir)) == {"plain", "spec"}:
                if run.error is None:
                    self.measure_and_judge(name)
                self.records += run.records(context)
        failure = None
        try:
            if self.records:
                self._record()
                self._report()
        except PerfgateError as error:
            failure = error
        codes = [e.exit_code for e in [*self.errors().values(), *self.internal_errors]]
        codes += [self._code(r) for r in self.final_records()]
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
        return reference.exit_code(record.status) if reference else status_exit_code(record.status)

    def final_records(self) -> list[RunRecord]:
        """Each scenario's last recorded run: the one whose verdicts are final."""
        return final_records(self.records)

    def errors(self) -> dict[str, PerfgateError]:
        """Why each scenario that could not be measured was not."""
        return {name: run.error for name, run in self.runs.items() if run.error is not None}

    def plain_note(self, name: str) -> str | None:
        """Why the scenario's plain twin was measured although it may be reused."""
        servers = self.servers.get(name)
        return servers.plain_note if servers else None

    def judged_locally(self, name: str) -> bool:
        """Whether the scenario was judged against this machine's own runs."""
        run = self.runs.get(name)
        return bool(run and run.reference and run.reference.local)

    def _record(self) -> None:
        """Record every run in one transaction; if that fails, keep them in a file and say so."""
        root, name = self.config.path.parent, self.workdir.name
        self.records = record_runs(self.history_url, self.records, root, name)

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
