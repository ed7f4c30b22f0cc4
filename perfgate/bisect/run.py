"""Measure a bisect: the good end's runs, the bad end against them, then the commits between.

Each commit is measured as the gate measures a scenario (perfgate.pipeline.ServerPair: the
speculative server, then the plain twin, which checks the speculative outputs), from a
temporary worktree of the commit (perfgate.bisect.git), its servers running this
environment's Python with the commit's source folders first on the path. Every run is
recorded in the history as soon as it is measured, in its own transaction, under the
bisect's name as its scenario (so the gate's trends and local references never see it),
with the commit as its commit, a ``bisect`` entry in its config naming the bisect, and its
verdicts against the good end.

Resuming is reading the history: the runs recorded under the same name, profile and
scenario digest at a commit of the range are that commit's first runs, whichever bisect
measured them; only what they leave undecided is measured again. The good end's runs must
share one machine: a run whose fingerprint differs from theirs in anything but what a commit
decides (perfgate.bisect.classify.COMMIT_FIELDS) is refused, naming the fields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from perfgate.baselines import Baseline
from perfgate.bisect.classify import likeness, machine_differences, regressed
from perfgate.bisect.git import Commit, Worktrees, write_interpreter
from perfgate.bisect.outcome import BISECT_KEY, BisectResult, CommitRuns, bisect_id
from perfgate.bisect.render import bad_line, good_line, start_line, step_line
from perfgate.bisect.search import Likeness, locate
from perfgate.config import Scenario
from perfgate.errors import ConfigError, PerfgateError
from perfgate.fingerprint import scenario_digest
from perfgate.gate.judge import Look
from perfgate.gate.verdict import Verdict, overall_status
from perfgate.measure import measure_mode
from perfgate.measured_verdicts import judge_look
from perfgate.pipeline import MeasureMode, ServerPair, record_runs
from perfgate.probe import BOOT_DIR
from perfgate.progress import SILENT, Reporter
from perfgate.reference import history_baseline
from perfgate.results import Measurement, RunContext, RunRecord
from perfgate.store import RunFilter, history, list_runs
from perfgate.store.bisect_steps import BisectStep, record_bisect_step

# The package a commit must hold under one of its source folders for its servers to run its
# code (not the installed one), per engine.
ENGINE_PACKAGES = {"embedded": "perfgate", "sglang": "sglang"}


@dataclass(frozen=True)
class BisectSpec:
    """What to bisect: the scenario, the range, where each commit's code is."""

    scenario: Scenario  # as configured
    name: str  # the scenario name the runs are recorded under
    repo: Path
    commits: tuple[Commit, ...]  # the good end first, the bad end last
    sources: tuple[str, ...] = (".",)  # folders of a commit put first on its servers' path
    good_runs: int = 3

    @property
    def digest(self) -> str:
        return scenario_digest(self.scenario)

    @property
    def id(self) -> str:
        return bisect_id(self.name, self.digest, self.commits[0].sha, self.commits[-1].sha)


@dataclass
class BisectRunner:
    """One bisect, measured and recorded commit by commit, a line said per commit."""

    spec: BisectSpec
    profile: str
    history_url: str
    workdir: Path
    context: RunContext  # where the bisect runs (its CI job); each run gets its commit
    alpha: float
    config_file: Path | None = None
    measure: MeasureMode = measure_mode
    progress: Reporter = SILENT  # servers starting, repeats
    say: Callable[[str], None] = print  # the steps, as they are decided
    _earlier: dict[str, list[RunRecord]] = field(default_factory=dict)
    _baseline: Baseline | None = None
    _trees: Worktrees | None = None
    _sessions: sessionmaker[Session] | None = None
    _warned: set[str] = field(default_factory=set)
    _servers: dict[str, ServerPair] = field(default_factory=dict)

    def run(self) -> BisectResult:
        """Measure the ends, then bisect; the result says what was found."""
        spec = self.spec
        self.say(start_line(spec.id, spec.scenario.name, spec.name, spec.commits))
        with history(self.history_url) as sessions, Worktrees(spec.repo) as trees:
            self._sessions, self._trees = sessions, trees
            self._earlier = self._earlier_runs(sessions)
            good = self._step(self._good_end())
            self.say(good_line(good))
            size = len(spec.commits) - 1
            bad = self._step(self._judged(size, spec.scenario.gated))
            self.say(bad_line(bad))
            result = BisectResult(spec.id, spec.scenario.name, spec.name, spec.commits, good, bad)
            if result.refused:
                return result
            metrics = regressed(bad.verdicts)
            steps: list[CommitRuns] = []
            known: dict[int, Likeness] = {}
            while (position := locate(size, known)).next is not None:
                runs = self._step(self._judged(position.next, metrics, bad.verdicts))
                known[runs.index] = runs.likeness or Likeness.FAILED
                steps.append(runs)
                self.say(step_line(runs, len(steps), size, position))
            return replace(result, steps=tuple(steps), metrics=metrics, position=position)

    def _earlier_runs(self, sessions: sessionmaker[Session]) -> dict[str, list[RunRecord]]:
        """The runs recorded under this bisect's name, profile and scenario digest at the
        range's commits, per commit, oldest first."""
        shas = {c.sha for c in self.spec.commits}
        where = RunFilter(scenario=self.spec.name, profile=self.profile)
        with sessions() as session:
            records = list_runs(session, where=where)
        found: dict[str, list[RunRecord]] = {}
        for record in records:
            commit = record.context.commit
            digest = record.measurement.fingerprint.get("scenario")
            if commit in shas and digest == self.spec.digest and commit is not None:
                found.setdefault(commit, []).append(record)
        return found

    def _good_end(self) -> CommitRuns:
        """The good end's newest `good_runs` runs: those in the history, then measured."""
        commit = self.spec.commits[0]
        earlier = self._earlier.get(commit.sha, [])[-self.spec.good_runs :]
        runs = CommitRuns(0, commit, list(earlier), reused=len(earlier))
        try:
            while len(runs.records) < self.spec.good_runs:
                measurement = self._measure(commit, len(runs.records) + 1)
                runs.records.append(self._record(commit, measurement, ()))
        finally:
            self._remove(commit)
        first = runs.records[0].measurement.fingerprint
        self._check_machine(first, [r.measurement for r in runs.records[1:]])
        self._baseline = history_baseline(runs.records, self.spec.scenario)
        return runs

    def _judged(
        self, index: int, metrics: Sequence[str], bad_end: Sequence[Verdict] = ()
    ) -> CommitRuns:
        """A commit's runs judged against the good end's on `metrics`: those in the history,
        then more while the gate asks for another run; a commit between is told from the bad
        end by its verdicts `bad_end` (perfgate.bisect.classify.likeness).

        A failure to measure the bad end is raised. A commit between whose first run fails
        is FAILED (stepped around); one whose later run fails keeps the verdicts so far, as
        the gate does (perfgate.pipeline.ScenarioRun.judge).
        """
        commit = self.spec.commits[index]
        earlier = self._earlier.get(commit.sha, [])
        runs = CommitRuns(index, commit, list(earlier), reused=len(earlier))
        look = self._look([r.measurement for r in runs.records], metrics) if earlier else None
        try:
            while look is None or look.another_run:
                measurement = self._measure(commit, len(runs.records) + 1)
                measured = [*(r.measurement for r in runs.records), measurement]
                look = self._look(measured, metrics)
                runs.records.append(self._record(commit, measurement, look.verdicts, runs))
        except PerfgateError as error:
            if index == len(self.spec.commits) - 1:
                raise
            if look is None:
                runs.likeness, runs.error = Likeness.FAILED, str(error)
                return runs
            self.say(f"note: {commit.short}: another run failed ({error}); its runs so far stand")
        finally:
            self._remove(commit)
        runs.verdicts = tuple(look.verdicts)
        runs.likeness = likeness(look.verdicts, bad_end)
        return runs

    def _look(self, measurements: Sequence[Measurement], metrics: Sequence[str]) -> Look:
        """The gate's look at a commit's runs against the good end's, on `metrics`."""
        assert self._baseline is not None
        good = self._baseline.fingerprint
        self._check_machine(good, measurements)
        # The commit's own fields (its engine's version, say) are no environment change.
        comparable = [replace(m, fingerprint=dict(good)) for m in measurements]
        baseline = replace(self._baseline, gated=tuple(metrics))
        return judge_look(
            comparable, baseline, alpha=self.alpha, max_runs=self.spec.scenario.max_runs
        )

    def _check_machine(self, good: Mapping[str, str], runs: Sequence[Measurement]) -> None:
        """Refuse runs measured in another environment than the good end's."""
        for measurement in runs:
            differences = machine_differences(good, measurement.fingerprint)
            if differences:
                fields = ", ".join(f"{f} ({a} -> {b})" for f, a, b in differences)
                raise ConfigError(
                    f"the runs of bisect {self.spec.id} were measured in another environment "
                    f"than the good end's: {fields}",
                    field="--name",
                    fix="bisect afresh under another --name (the runs recorded so far stay)",
                )

    def _measure(self, commit: Commit, number: int) -> Measurement:
        """One run of `commit`: both servers launched from its worktree."""
        assert self._trees is not None
        tree = self._trees.checkout(commit.sha)
        sources = [tree / folder for folder in self.spec.sources]
        self._warn_without_package(commit, sources)
        base = self.spec.scenario
        python = write_interpreter(
            tree.parent / f"{commit.sha[:12]}-python",
            base.python or sys.executable,
            sources,
            first=[BOOT_DIR],
        )
        scenario = replace(base, name=self.spec.name, python=str(python))
        if commit.sha not in self._servers:  # one preflight per commit
            self._servers[commit.sha] = ServerPair(
                self.profile, self.config_file, self.progress, launch=self.measure
            )
        servers = self._servers[commit.sha]
        folder = self.workdir / commit.sha[:12] / f"run-{number}"
        measurement = servers.measure(scenario, folder)
        tag = {**self._tag(), "index": self.spec.commits.index(commit)}
        config = {**measurement.config, "python": base.python, BISECT_KEY: tag}
        return replace(measurement, config=config)

    def _record(
        self,
        commit: Commit,
        measurement: Measurement,
        verdicts: Sequence[Verdict],
        earlier: CommitRuns | None = None,
    ) -> RunRecord:
        """Record one run at once, in its own transaction; return it with its id."""
        assert self._sessions is not None
        ids = tuple(earlier.run_ids) if earlier else ()
        judged = tuple(replace(v, with_runs=ids) for v in verdicts)
        against = None
        if verdicts:
            good = self.spec.commits[0]
            against = f"the good end {good.short} (bisect {self.spec.id})"
        context = replace(self.context, commit=commit.sha, branch=None, pr=None, dirty=False)
        record = RunRecord(
            measurement,
            context,
            judged,
            overall_status(judged, measurement.outputs_pass),
            judged_against=against,
        )
        root = self.config_file.parent if self.config_file else Path.cwd()
        (recorded,) = record_runs(self._sessions, [record], root, f"bisect-{self.spec.id}")
        return recorded

    def _tag(self) -> dict[str, Any]:
        """The bisect's entry in its runs' config and its steps, less a commit's place."""
        return {
            "id": self.spec.id,
            "scenario": self.spec.scenario.name,
            "good": self.spec.commits[0].sha,
            "bad": self.spec.commits[-1].sha,
            "commits": len(self.spec.commits) - 1,
            "sources": list(self.spec.sources),
        }

    def _step(self, runs: CommitRuns) -> CommitRuns:
        """Record how a commit was judged and the runs it read (perfgate.store.bisect_steps):
        the runs reused from the history are this bisect's only trace at that commit."""
        assert self._sessions is not None
        likeness = "good end" if runs.index == 0 else (runs.likeness or Likeness.FAILED).value
        step = BisectStep(
            self.spec.id,
            self.spec.name,
            self.profile,
            runs.index,
            runs.commit.sha,
            likeness,
            tuple(runs.run_ids),
            self._tag(),
        )
        with self._sessions.begin() as session:  # a failure: history()'s one line
            record_bisect_step(session, step)
        return runs

    def _remove(self, commit: Commit) -> None:
        if self._trees is not None:
            self._trees.remove(commit.sha)

    def _warn_without_package(self, commit: Commit, sources: Sequence[Path]) -> None:
        package = ENGINE_PACKAGES.get(self.spec.scenario.engine)
        if package is None or package in self._warned:
            return
        if not any((folder / package).is_dir() for folder in sources):
            self._warned.add(package)
            where = ", ".join(self.spec.sources)
            self.say(
                f"note: commit {commit.short} holds no {package} package under {where}: its "
                f"servers run the installed {package} (name the folder that holds it: --source)"
            )
