"""`probe_write`: a history a run could not write to is found by writing, and nothing persists."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import create_engine, inspect, text

from perfgate.errors import ConfigError, ExitCode, InfrastructureError
from perfgate.store import close_history, open_history, probe_write
from perfgate.store.database import parse_history_url
from perfgate.store.write_check import PROBE_TABLE

from ..conftest import REPO
from ..lockdown import immutable, require_unshare, with_mounts
from .postgres import PostgresServer


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _tables(url: str) -> set[str]:
    engine = create_engine(str(parse_history_url(url)))
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def test_a_history_that_takes_writes_is_left_as_it_was(history: str, tmp_path: Path) -> None:
    before = _snapshot(tmp_path)
    tables = _tables(history)
    assert probe_write(history) == "a write to its schema version, rolled back"
    assert _snapshot(tmp_path) == before  # SQLite: the same bytes, no -wal, -shm or temp file
    assert _tables(history) == tables and PROBE_TABLE not in tables


def test_a_new_history_creates_nothing(db_url: str, tmp_path: Path) -> None:
    if db_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'not' / 'yet' / 'history.db'}"
        assert probe_write(db_url) == (
            f"not created yet; {tmp_path} is writable, so the first run creates it"
        )
        assert list(tmp_path.iterdir()) == []
        return
    # PostgreSQL: an empty database, whose schema the first run creates.
    assert probe_write(db_url) == "a table created and rolled back (a run creates the schema)"
    assert _tables(db_url) == set()


def test_an_immutable_sqlite_history_is_bad_input(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    close_history(open_history(url))
    before = _snapshot(tmp_path)
    with immutable(tmp_path / "history.db"), pytest.raises(ConfigError) as caught:
        probe_write(url)
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    assert str(caught.value).startswith(f"{tmp_path / 'history.db'}: cannot be opened for writing")
    assert "chattr -i" in str(caught.value) and "--db or PERFGATE_DB_URL" in str(caught.value)
    assert _snapshot(tmp_path) == before  # a read-only SQLite connection leaves -wal and -shm


def _probe_under_read_only(folder: Path, url: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import sys\nfrom perfgate.store import probe_write\nfrom perfgate.errors import "
        "PerfgateError\ntry:\n    print(probe_write(sys.argv[1]))\nexcept PerfgateError as e:\n"
        "    print(e)\n    sys.exit(int(e.exit_code))\n"
    )
    argv = with_mounts([sys.executable, "-c", script, url], read_only=[folder])
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)


def test_a_history_on_a_read_only_mount_is_bad_input(tmp_path: Path) -> None:
    require_unshare()
    folder = tmp_path / "mounted"
    folder.mkdir()
    url = f"sqlite:///{folder / 'history.db'}"
    close_history(open_history(url))
    done = _probe_under_read_only(folder, url)
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stdout.startswith(f"{folder / 'history.db'}: cannot be opened for writing")
    assert "read-only mount" in done.stdout and "PERFGATE_DB_URL" in done.stdout
    # A history not created yet, in a read-only folder: the folder is named.
    done = _probe_under_read_only(folder, f"sqlite:///{folder / 'runs' / 'history.db'}")
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stdout.startswith(f"{folder}: no file can be created in this folder")
    assert not (folder / "runs").exists()


@pytest.fixture
def read_only_user(history: str, postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of the history for a login that may read its tables and nothing more."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    admin = create_engine(str(parse_history_url(history)), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {role} LOGIN"))
        connection.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
    try:
        yield sqlalchemy.make_url(history).set(username=role).render_as_string(False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP OWNED BY {role}"))
            connection.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_postgresql_user_who_may_only_read_is_bad_input(read_only_user: str) -> None:
    with pytest.raises(ConfigError) as caught:
        probe_write(read_only_user)
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    assert "can be read but not written (permission denied" in str(caught.value)
    assert "read-only replica" in str(caught.value) and "PERFGATE_DB_URL" in str(caught.value)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_read_only_postgresql_database_is_bad_input(history: str) -> None:
    name = sqlalchemy.make_url(history).database
    admin = create_engine(str(parse_history_url(history)), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:  # what a hot standby or a frozen database answers
        connection.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    admin.dispose()
    with pytest.raises(ConfigError, match="cannot execute UPDATE in a read-only transaction"):
        probe_write(history)


def test_an_unreachable_server_is_infrastructure() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(InfrastructureError, match="cannot reach the history database"):
        probe_write("postgresql://perfgate@127.0.0.1:9/none")
