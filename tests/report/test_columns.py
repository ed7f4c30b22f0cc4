"""The report's column query: one value per run and metric, read in the database, agrees with
the same figures computed from the runs in memory; on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from perfgate.store import RunFilter, history_columns, record_run
from perfgate.store.columns import central_value, columns_from_records
from perfgate.store.models import RunRow

from .history import stepped_history


def test_columns_from_the_database_are_the_ones_from_memory(
    sessions: sessionmaker[Session],
) -> None:
    history = stepped_history(runs=12)
    # Recorded newest first: the columns come back in time order all the same.
    with sessions.begin() as session:
        recorded = [replace(r, id=record_run(session, r)) for r in reversed(history)]
    with sessions() as session:
        read = history_columns(session)
    expected = columns_from_records(recorded)
    assert [r.id for r in read.runs] == [r.id for r in expected.runs]
    assert read.runs == expected.runs
    assert read.verdicts == expected.verdicts
    assert read.values.keys() == expected.values.keys()
    for key, by_run in expected.values.items():
        assert read.values[key] == pytest.approx(by_run), key
    for key, by_run in expected.phase_ms.items():
        assert read.phase_ms[key] == pytest.approx(by_run), key


def test_a_filter_selects_runs_and_reuse_is_read_from_the_servers_column(
    sessions: sessionmaker[Session],
) -> None:
    history = stepped_history(runs=10)
    with sessions.begin() as session:
        ids = [record_run(session, r) for r in history]
        reused = {"plain": {"command": "x", "reused_from": ids[0]}, "spec": {}}
        session.execute(update(RunRow).where(RunRow.id == ids[-1]).values(servers=reused))
    with sessions() as session:
        feature = history_columns(session, RunFilter(branch="feature/x"))
        everything = history_columns(session)
    assert [r.branch for r in feature.runs] == ["feature/x", "feature/x"]
    assert all(
        run_id in {r.id for r in feature.runs} for run_id in feature.values[("spec", "verify_ms")]
    )
    assert [r.plain_reused_from for r in everything.runs] == [None] * 9 + [ids[0]]


@pytest.mark.parametrize(
    ("values", "expected"),
    [([4.0], 4.0), ([4.0, 6.0], 5.0), ([1.0, 5.0, 100.0], 5.0), ([1.0, 2.0, 4.0, 50.0], 3.0),
     ([1.0, 2.0, 3.0, 4.0, 100.0], 3.0)],
)  # fmt: skip
def test_central_value_drops_the_extremes_from_three_repeats_on(
    values: list[float], expected: float
) -> None:
    assert central_value(values) == expected
