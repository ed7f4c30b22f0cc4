"""Each commit as a bisect judged it, in the history's `bisect_steps` table.

A bisect records its runs like any other (perfgate.pipeline.record_runs); where it reuses runs
that an earlier bisect recorded (a resumed or a narrower one), it measures nothing at those
commits, so only this row says how it judged them. Written after each commit is judged, read
by the report (perfgate.report.bisects).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfgate.store.models import BisectStepRow
from perfgate.store.queries import RunFilter
from perfgate.store.records import as_utc


@dataclass(frozen=True)
class BisectStep:
    """One commit of a bisect's range as it was judged, and the runs the judgement read."""

    bisect: str  # the bisect's id (perfgate.bisect.outcome.bisect_id)
    name: str  # the scenario its runs are recorded under
    profile: str
    position: int  # the commit's place in the range: 0 the good end
    commit: str
    likeness: str  # "good end", or a perfgate.bisect.search.Likeness value
    run_ids: tuple[int, ...]
    tag: Mapping[str, Any]  # the bisect's entry in its runs' config (perfgate.bisect.outcome)
    id: int | None = None  # in the history, oldest first
    recorded_at: datetime | None = None


def record_bisect_step(session: Session, step: BisectStep) -> int:
    """Add one step; return its id (the caller frames the transaction)."""
    row = BisectStepRow(
        bisect=step.bisect,
        name=step.name,
        profile=step.profile,
        position=step.position,
        commit=step.commit,
        likeness=step.likeness,
        run_ids=list(step.run_ids),
        tag=dict(step.tag),
        recorded_at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    return row.id


def bisect_steps(session: Session, where: RunFilter | None = None) -> list[BisectStep]:
    """The steps of the bisects recorded under `where`'s scenario name and runner profile,
    oldest first; none under a filter on branch or pull request (a bisect's runs carry
    neither)."""
    where = where or RunFilter()
    if where.branch is not None or where.pr is not None:
        return []
    query = select(BisectStepRow).order_by(BisectStepRow.id)
    if where.scenario is not None:
        query = query.where(BisectStepRow.name == where.scenario)
    if where.profile is not None:
        query = query.where(BisectStepRow.profile == where.profile)
    return [_step(row) for row in session.scalars(query)]


def _step(row: BisectStepRow) -> BisectStep:
    return BisectStep(
        row.bisect,
        row.name,
        row.profile,
        row.position,
        row.commit,
        row.likeness,
        tuple(row.run_ids),
        row.tag,
        row.id,
        as_utc(row.recorded_at),
    )
