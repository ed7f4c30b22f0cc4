"""A run goes in whole and comes back equal, on both backends; or it does not go in at all."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from perfgate.errors import ConfigError
from perfgate.store import close_history, list_runs, load_run, open_history, record_run
from perfgate.store.database import BUSY_TIMEOUT_S
from perfgate.store.models import (
    Base,
    BisectStepRow,
    OutputRow,
    PhaseRow,
    RunRow,
    SampleRow,
    VerdictRow,
)

from ..factories import measurement, record

TABLES = (RunRow, SampleRow, PhaseRow, OutputRow, VerdictRow, BisectStepRow)


def row_counts(sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as session:
        return {
            table.__tablename__: session.scalar(select(func.count()).select_from(table)) or 0
            for table in TABLES
        }


def test_a_run_round_trips(sessions: sessionmaker[Session]) -> None:
    original = record(measurement(spec_outputs=((1, 2, 3), (4, 5, 7))))
    with sessions.begin() as session:
        run_id = record_run(session, original)
    with sessions() as session:
        loaded = load_run(session, run_id)
    assert loaded.id == run_id
    m, o = loaded.measurement, original.measurement
    assert m.spec.samples == o.spec.samples and m.plain.samples == o.plain.samples
    assert m.samples()["speedup"] == pytest.approx(o.samples()["speedup"])
    assert m.spec.phases == o.spec.phases
    assert m.spec.outputs == o.spec.outputs and m.plain.outputs == o.plain.outputs
    assert m.equivalence == o.equivalence and not m.equivalence.ok
    assert m.fingerprint == o.fingerprint and m.config == o.config
    assert m.started_at == o.started_at and m.started_at.tzinfo is not None
    assert m.spec.command == o.spec.command and m.spec.server_info == o.spec.server_info
    assert loaded.verdicts == original.verdicts and loaded.status == original.status
    assert loaded.context == original.context


def test_a_failed_transaction_leaves_no_partial_run(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), sessions.begin() as session:
        record_run(session, record(measurement()))
        raise RuntimeError("the process failed half-way")
    assert set(row_counts(sessions).values()) == {0}


def test_a_failure_inside_the_writes_leaves_nothing(sessions: sessionmaker[Session]) -> None:
    """The run, samples and phases are written; the verdicts fail: none of it stays."""
    with sessions.begin() as session:
        record_run(session, record(measurement()))
    before = row_counts(sessions)

    def fail(*_args: object) -> None:
        raise RuntimeError("the disk filled up while writing verdicts")

    event.listen(VerdictRow, "before_insert", fail)
    try:
        with pytest.raises(RuntimeError, match="disk filled"), sessions.begin() as session:
            record_run(session, record(measurement()))
    finally:
        event.remove(VerdictRow, "before_insert", fail)
    assert row_counts(sessions) == before
    with sessions.begin() as session:  # and the next record goes in
        assert record_run(session, record(measurement())) > 1


def test_runs_list_oldest_first_and_filter_by_scenario(sessions: sessionmaker[Session]) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with sessions.begin() as session:
        ids = [
            record_run(
                session, record(measurement(scenario=name, started=start + timedelta(hours=i)))
            )
            for i, name in enumerate(["a", "b", "a", "a"])
        ]
    with sessions() as session:
        assert [r.id for r in list_runs(session)] == ids
        assert [r.id for r in list_runs(session, scenario="a")] == [ids[0], ids[2], ids[3]]
        assert [r.id for r in list_runs(session, scenario="a", limit=2)] == ids[2:]


def test_an_unknown_run_names_the_flag(sessions: sessionmaker[Session]) -> None:
    with sessions() as session, pytest.raises(ConfigError, match="--run: no run 7 in the history"):
        load_run(session, 7)


def test_the_models_declare_every_table() -> None:
    assert {table.__tablename__ for table in TABLES} == set(Base.metadata.tables)


POSTGRES_CASE = """
from tests.conftest import postgres_server

def test_needs_postgres(postgres_server):
    pass
"""


@pytest.mark.parametrize(("required", "outcome"), [("", "skipped"), ("1", "errors")])
def test_a_missing_postgres_skips_unless_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: str, outcome: str
) -> None:
    monkeypatch.setenv("PERFGATE_POSTGRES_BINDIR", str(pytester.path / "no-postgres"))
    monkeypatch.setenv("PERFGATE_REQUIRE_POSTGRES", required)
    pytester.makepyfile(test_inner=POSTGRES_CASE)
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines(["*PERFGATE_POSTGRES_BINDIR=*no-postgres holds no pg_ctl*"])


def test_a_long_reader_does_not_hold_up_a_recorder(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        record_run(session, record(measurement()))
    with sessions() as reader:
        assert len(list_runs(reader)) == 1  # a read transaction stays open meanwhile
        began = time.monotonic()
        with sessions.begin() as writer:
            record_run(writer, record(measurement()))
        assert time.monotonic() - began < BUSY_TIMEOUT_S / 2
        assert len(list_runs(reader)) in (1, 2)  # its snapshot (SQLite) or the latest (PG)
    with sessions() as session:
        assert len(list_runs(session)) == 2


def test_on_sqlite_recording_takes_the_write_lock_at_begin_and_reading_does_not(
    tmp_path: Path,
) -> None:
    sessions = open_history(f"sqlite:///{tmp_path / 'history.db'}")
    begins: list[str] = []
    engine = sessions.kw["bind"]

    def log(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("BEGIN"):
            begins.append(statement)

    event.listen(engine, "before_cursor_execute", log)
    with sessions.begin() as session:
        record_run(session, record(measurement()))
        record_run(session, record(measurement()))  # the same transaction: one BEGIN
    with sessions() as session:
        list_runs(session)
    close_history(sessions)
    assert begins == ["BEGIN IMMEDIATE", "BEGIN DEFERRED"]
