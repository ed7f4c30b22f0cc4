"""Runs loaded from a file (`perfgate history import`): each one once, linked as when recorded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfgate.results import RunRecord
from perfgate.store.models import RunRow
from perfgate.store.records import as_utc, record_run, take_write_lock


@dataclass(frozen=True)
class ImportedRun:
    id: int  # in this history
    new: bool  # False: the history held the run already


def import_runs(session: Session, records: Sequence[RunRecord]) -> list[ImportedRun]:
    """Record each run the history does not hold yet, in order; say which id each one has.

    A run is held already when a run of the same scenario and profile started and finished at
    the same moments, so importing a file twice records it once. The ids in the verdicts'
    ``with_runs`` are mapped to this history's; a run without an id (kept by a session that
    could not record it) is linked, as that session would have, to the runs of its scenario
    before it in the file.
    """
    take_write_lock(session)  # before the first read: the runs looked for cannot appear meanwhile
    ids: dict[int, int] = {}  # id in the file -> id here
    earlier: dict[str, list[int]] = {}  # scenario -> ids here of the file's runs without an id
    imported = []
    for record in records:
        scenario = record.measurement.scenario
        held = _held(session, record)
        if held is not None:
            run = ImportedRun(held, new=False)
        else:
            if record.id is None:
                linked = tuple(earlier.get(scenario, ()))
                verdicts = tuple(replace(v, with_runs=linked) for v in record.verdicts)
            else:
                verdicts = tuple(
                    replace(v, with_runs=tuple(ids[i] for i in v.with_runs if i in ids))
                    for v in record.verdicts
                )
            run = ImportedRun(record_run(session, replace(record, verdicts=verdicts)), new=True)
        if record.id is not None:
            ids[record.id] = run.id
        else:
            earlier.setdefault(scenario, []).append(run.id)
        imported.append(run)
    return imported


def _held(session: Session, record: RunRecord) -> int | None:
    """The id of the run in this history that is `record`, if there is one."""
    m = record.measurement
    second = timedelta(seconds=1)
    rows = session.execute(
        select(RunRow.id, RunRow.started_at, RunRow.finished_at).where(
            RunRow.scenario == m.scenario,
            RunRow.profile == m.profile,
            RunRow.started_at.between(m.started_at - second, m.started_at + second),
        )
    )
    for run_id, started, finished in rows:
        if as_utc(started) == m.started_at and as_utc(finished) == m.finished_at:
            return int(run_id)
    return None
