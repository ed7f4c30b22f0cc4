"""A history perfgate must not use gives one line, a documented exit code, and is left as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from perfgate.cli import main
from perfgate.errors import ConfigError, ExitCode, InfrastructureError
from perfgate.store import (
    close_history,
    database_errors,
    inspect_history,
    open_history,
    record_run,
)
from perfgate.store.database import parse_history_url
from perfgate.store.models import RunRow

from ..factories import measurement, record
from ..in_process import perfgate_main
from .postgres import PostgresServer


def files_in(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def set_version(url: str, revision: str) -> None:
    engine = create_engine(str(parse_history_url(url)))
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    engine.dispose()


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    before = files_in(tmp_path)
    with pytest.raises(ConfigError, match=r"junk\.db: is not a usable SQLite database") as caught:
        open_history(f"sqlite:///{tmp_path / 'junk.db'}")
    assert caught.value.exit_code == ExitCode.BAD_INPUT and "\n" not in str(caught.value)
    assert files_in(tmp_path) == before


def test_another_applications_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    foreign = sqlite3.connect(tmp_path / "shop.db")
    foreign.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    foreign.execute("INSERT INTO customers (name) VALUES ('ada')")
    foreign.commit()
    foreign.close()
    before = files_in(tmp_path)
    with pytest.raises(ConfigError, match=r"shop.db: is not a perfgate history .*customers"):
        open_history(f"sqlite:///{tmp_path / 'shop.db'}")
    assert files_in(tmp_path) == before


def test_a_history_from_a_newer_perfgate_is_refused_untouched(db_url: str) -> None:
    sessions = open_history(db_url)
    with sessions.begin() as session:
        record_run(session, record(measurement()))
    close_history(sessions)
    set_version(db_url, "9999")
    path = parse_history_url(db_url).database
    before = Path(str(path)).read_bytes() if db_url.startswith("sqlite") else b""

    with pytest.raises(ConfigError, match="schema revision '9999', written by a newer perfgate"):
        open_history(db_url)
    assert inspect_history(db_url).current == "9999"
    if db_url.startswith("sqlite"):
        assert Path(str(path)).read_bytes() == before
    engine = create_engine(str(parse_history_url(db_url)))
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(RunRow)) == 1
    engine.dispose()


def test_an_unreachable_server_is_an_infrastructure_failure() -> None:
    with pytest.raises(InfrastructureError, match="cannot reach the history database") as caught:
        open_history("postgresql://perfgate:secret@127.0.0.1:9/history?connect_timeout=3")
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.INFRASTRUCTURE
    assert "\n" not in message and "secret" not in message and "***" in message


def test_a_missing_database_on_a_live_server_is_bad_input(postgres_server: PostgresServer) -> None:
    with pytest.raises(ConfigError, match=r"refused the connection.*does not exist"):
        open_history(postgres_server.url("no_such_history"))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "cannot parse 'not a url' as a database URL"),
        ("mysql+nosuchdriver://u@h/db", "no database driver for 'mysql\\+nosuchdriver'"),
        # `db upgrade` made one and exited 0; a run would record into it and lose it
        ("sqlite://", "'sqlite://' is a database in memory: what is recorded there is lost"),
        ("sqlite:///:memory:", "is a database in memory"),
    ],
)
def test_a_bad_url_names_the_setting(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        open_history(url)
    assert "PERFGATE_DB_URL" in str(caught.value)


def test_a_directory_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        open_history(f"sqlite:///{tmp_path}")


def test_the_cli_says_one_line_and_exits_with_the_documented_code(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"\x00garbage" * 500)
    cases = [
        ("sqlite:///junk.db", ExitCode.BAD_INPUT, "is not a usable SQLite database"),
        ("postgresql://u@127.0.0.1:9/h?connect_timeout=3", ExitCode.INFRASTRUCTURE, "cannot reach"),
    ]
    for url, code, message in cases:
        result = perfgate_main("history", "list", "--db", url, cwd=tmp_path)
        assert result.returncode == code, result.stderr
        assert result.stderr.count("\n") == 1 and message in result.stderr
        assert result.stderr.startswith("perfgate: error: ") and result.stdout == ""


def test_a_failure_after_opening_is_worded_too(sessions: sessionmaker[Session]) -> None:
    with (
        pytest.raises(InfrastructureError, match="no_such_table") as caught,
        database_errors(sessions),
        sessions() as session,
    ):
        session.execute(text("SELECT * FROM no_such_table"))
    assert "\n" not in str(caught.value)


def test_a_damaged_history_is_bad_input_when_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    sessions = open_history(url)
    with sessions.begin() as session:
        for _ in range(30):
            record_run(session, record(measurement()))
    close_history(sessions)
    with (tmp_path / "history.db").open("r+b") as damaged:
        damaged.seek(3 * 4096)  # past the schema's first pages: the rows' pages
        damaged.write(b"\xff" * 40_000)
    assert main(["history", "list", "--db", url]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "database disk image is malformed" in err
