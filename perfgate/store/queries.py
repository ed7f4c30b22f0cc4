"""The questions the gate, the report and `perfgate history` ask of the history.

Each takes a session and returns frozen dataclasses. The indexes behind them are declared in
models.py (and created by the migrations): runs by (scenario, profile, started_at), by branch,
by pull request; samples by (run, metric, mode).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session, selectinload

from perfgate.errors import ConfigError
from perfgate.results import RunRecord
from perfgate.spec.slowdown import FINGERPRINT_FIELD
from perfgate.store.models import RunRow, SampleRow
from perfgate.store.records import as_utc, to_record


@dataclass(frozen=True)
class RunFilter:
    """Which runs to select; None matches any."""

    scenario: str | None = None
    profile: str | None = None
    branch: str | None = None
    pr: str | None = None
    status: str | None = None

    def apply(self, query: Select[Any]) -> Select[Any]:
        """Add this filter's conditions to a query over runs."""
        for column, value in (
            (RunRow.scenario, self.scenario),
            (RunRow.profile, self.profile),
            (RunRow.branch, self.branch),
            (RunRow.pr, self.pr),
            (RunRow.status, self.status),
        ):
            if value is not None:
                query = query.where(column == value)
        return query

    def describe(self) -> str:
        """The selection in words, e.g. "scenario 'tiny', branch 'main'"; "" when it is all."""
        named = (
            ("scenario", self.scenario),
            ("runner profile", self.profile),
            ("branch", self.branch),
            ("PR", self.pr),
            ("status", self.status),
        )
        return ", ".join(f"{name} {value!r}" for name, value in named if value is not None)


@dataclass(frozen=True)
class MetricPoint:
    """One run's samples of one metric: a point of a metric's history."""

    run_id: int
    started_at: datetime
    commit: str | None
    branch: str | None
    status: str
    values: tuple[float, ...]  # one per repeat, in repeat order


def _full_runs() -> Select[Any]:
    return select(RunRow).options(
        selectinload(RunRow.samples),
        selectinload(RunRow.phases),
        selectinload(RunRow.outputs),
        selectinload(RunRow.verdicts),
    )


def load_run(session: Session, run_id: int) -> RunRecord:
    """Return one recorded run; a ConfigError if there is no such run."""
    row = session.scalars(_full_runs().where(RunRow.id == run_id)).first()
    if row is None:
        raise ConfigError(
            f"no run {run_id} in the history", field="--run", fix="see `perfgate history list`"
        )
    return to_record(row)


def load_runs(session: Session, run_ids: Sequence[int]) -> list[RunRecord]:
    """Return the runs with these ids that exist, in id order (approved runs, say)."""
    rows = session.scalars(_full_runs().where(RunRow.id.in_(run_ids)).order_by(RunRow.id))
    return [to_record(row) for row in rows]


def list_runs(
    session: Session,
    scenario: str | None = None,
    limit: int | None = None,
    *,
    where: RunFilter | None = None,
) -> list[RunRecord]:
    """Return recorded runs, oldest first: the newest `limit` of them when given."""
    selected = where or RunFilter()
    if scenario is not None:
        selected = replace(selected, scenario=scenario)
    query = selected.apply(_full_runs()).order_by(RunRow.id.desc())
    if limit:
        query = query.limit(limit)
    return [to_record(row) for row in reversed(session.scalars(query).all())]


def last_runs(
    session: Session, scenario: str, profile: str, k: int, status: str | None = None
) -> list[RunRecord]:
    """The last `k` runs of a scenario on a profile (of one status if given), oldest first."""
    query = RunFilter(scenario, profile, status=status).apply(_full_runs())
    query = query.order_by(RunRow.started_at.desc(), RunRow.id.desc()).limit(k)
    return [to_record(row) for row in reversed(session.scalars(query).all())]


SCAN_LIMIT = 500  # runs looked at, newest first, for ones of a given fingerprint


def comparable_runs(
    session: Session,
    scenario: str,
    profile: str,
    fingerprint: Mapping[str, str],
    k: int,
    *,
    statuses: Sequence[str],
    before: int | None = None,
) -> list[RunRecord]:
    """The newest `k` runs of a scenario on a profile with exactly this fingerprint and one of
    these statuses (recorded before run `before`, if given), oldest first.

    An injected slowdown (perfgate.spec.slowdown) in `fingerprint` is left out of the match,
    and no run that had one is chosen: a run slowed on purpose is judged against the runs that
    were not, and never stands as a reference itself. The machine (the other soft field,
    perfgate.spec.environment) is matched: a local reference is this machine's own runs."""
    query = (
        RunFilter(scenario, profile)
        .apply(select(RunRow.id, RunRow.fingerprint))
        .where(RunRow.status.in_(list(statuses)))
        .order_by(RunRow.id.desc())
    )
    if before is not None:
        query = query.where(RunRow.id < before)
    wanted = {k: v for k, v in fingerprint.items() if k != FINGERPRINT_FIELD}
    ids: list[int] = []
    for run_id, found in session.execute(query.limit(SCAN_LIMIT)):
        if found == wanted:
            ids.append(run_id)
            if len(ids) == k:
                break
    return load_runs(session, ids)


def run_ids(session: Session, where: RunFilter | None = None) -> list[int]:
    """The ids of the selected runs, oldest first (cheap: no run is loaded)."""
    query = (where or RunFilter()).apply(select(RunRow.id)).order_by(RunRow.id)
    return list(session.scalars(query))


def recorded_names(session: Session) -> set[tuple[str, str, str | None]]:
    """Every (scenario, runner profile, branch) the history holds a run of."""
    query = select(RunRow.scenario, RunRow.profile, RunRow.branch).distinct()
    return {(scenario, profile, branch) for scenario, profile, branch in session.execute(query)}


def iter_runs(
    session: Session, where: RunFilter | None = None, batch: int = 200
) -> Iterator[RunRecord]:
    """Yield the selected runs oldest first, loading `batch` at a time (for exports)."""
    ids = run_ids(session, where)
    for start in range(0, len(ids), batch):
        yield from load_runs(session, ids[start : start + batch])
        session.expunge_all()  # keep memory flat over a long history


def metric_history(
    session: Session,
    scenario: str,
    profile: str,
    metric: str,
    mode: str = "spec",
    limit: int | None = None,
) -> list[MetricPoint]:
    """The samples of one metric across the runs of a scenario on a profile, oldest run first.

    `mode` is the server the samples came from ("spec" or "plain"; `speedup` is stored under
    "spec"). Runs without the metric are left out; with `limit`, only the newest `limit` runs
    that have it are returned.
    """
    runs = select(RunRow.id).where(RunRow.scenario == scenario, RunRow.profile == profile)
    if limit:
        has_metric = (
            select(SampleRow.run_id)
            .where(SampleRow.run_id == RunRow.id)
            .where(SampleRow.metric == metric, SampleRow.mode == mode)
            .exists()
        )
        newest = runs.where(has_metric).order_by(RunRow.started_at.desc(), RunRow.id.desc())
        runs = select(RunRow.id).where(RunRow.id.in_(newest.limit(limit).scalar_subquery()))
    # Core, not ORM, execution: 50,000 rows cost a third of the time. Two queries, not one join:
    # each run's columns (a parsed timestamp) once, not once per sample.
    connection = session.connection()
    values: dict[int, list[float]] = {}
    samples = (
        select(SampleRow.run_id, SampleRow.value)
        .where(SampleRow.run_id.in_(runs.scalar_subquery()))
        .where(SampleRow.metric == metric, SampleRow.mode == mode)
        .order_by(SampleRow.run_id, SampleRow.repeat)
    )
    for run_id, value in connection.execute(samples):
        values.setdefault(run_id, []).append(value)
    columns = (RunRow.id, RunRow.started_at, RunRow.commit, RunRow.branch, RunRow.status)
    rows = connection.execute(
        select(*columns)
        .where(RunRow.id.in_(runs.scalar_subquery()))
        .order_by(RunRow.started_at, RunRow.id)
    )
    return [
        MetricPoint(run_id, as_utc(started_at), commit, branch, status, tuple(values[run_id]))
        for run_id, started_at, commit, branch, status in rows
        if run_id in values
    ]
