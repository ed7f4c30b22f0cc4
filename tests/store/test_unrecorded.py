"""A history that stops taking writes while a sweep measures: the point is kept, not lost."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy

from perfgate.store import close_history, list_runs, open_history
from perfgate.store.database import parse_history_url

from ..conftest import run_perfgate_while, write_config
from ..in_process import perfgate_main

SPEC_MEASURING = "tiny-sweep spec: repeat 1 of"


def _admin(url: str, *statements: str) -> None:
    database = sqlalchemy.make_url(url).database
    admin = sqlalchemy.create_engine(
        str(parse_history_url(url).set(database="postgres")), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement.format(db=database))
    finally:
        admin.dispose()


def _scenarios(url: str) -> list[str]:
    sessions = open_history(url)
    try:
        with sessions() as session:
            return [r.measurement.scenario for r in list_runs(session)]
    finally:
        close_history(sessions)


@contextmanager
def _failover(db_url: str) -> Iterator[None]:
    """A failover to a read-only server: every connection is cut, the new ones only read."""
    _admin(
        db_url,
        'ALTER DATABASE "{db}" SET default_transaction_read_only = on',
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = '{db}' AND pid <> pg_backend_pid()",
    )
    yield


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_sweep_point_whose_record_fails_is_kept_and_imported_once(
    db_url: str, tmp_path: Path
) -> None:
    write_config(tmp_path)
    close_history(open_history(db_url))
    argv = ["sweep", "--scenario", "tiny", "--steps", "2", "--repeats", "1", "--db", db_url]
    code, text = run_perfgate_while(tmp_path, argv, SPEC_MEASURING, lambda _: _failover(db_url))
    assert code == 64, text
    assert "can be read but not written" in text
    (kept,) = sorted((tmp_path / ".perfgate" / "unrecorded").glob("*.jsonl"))
    assert f"perfgate history import {kept}" in text
    assert _scenarios(db_url) == []

    _admin(db_url, 'ALTER DATABASE "{db}" RESET default_transaction_read_only')
    first = perfgate_main("history", "import", str(kept), "--db", db_url, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "imported 1 run(s) as #" in first.stdout
    again = perfgate_main("history", "import", str(kept), "--db", db_url, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "imported 0 run(s); 1 already in the history" in again.stdout
    assert _scenarios(db_url) == ["tiny-sweep"]
