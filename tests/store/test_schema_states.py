"""A history whose recorded schema revision is wrong: refused untouched, in one line (exit 64),
naming the history and the fix; `perfgate db stamp` records the revision its tables are at.

Each state is made as an operator would make it: a second row in `alembic_version`, the table
dropped or emptied, a revision written back by hand.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from perfgate.errors import ConfigError, ExitCode
from perfgate.store import close_history, inspect_history, open_history
from perfgate.store.database import create_history_engine, parse_history_url
from perfgate.store.schema import FIRST_REVISION, head_revision

from ..in_process import perfgate_main

STATES = {
    "two-rows": ["INSERT INTO alembic_version (version_num) VALUES ('0002')"],
    "dropped": ["DROP TABLE alembic_version"],
    "empty": ["DELETE FROM alembic_version"],
    "stale": ["UPDATE alembic_version SET version_num = '0002'"],
}


def _execute(url: str, statements: list[str]) -> None:
    engine = create_history_engine(parse_history_url(url))
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def _snapshot(url: str, folder: Path) -> object:
    """What a refusal must leave as it was: SQLite's bytes; PostgreSQL's tables, columns, rows."""
    if url.startswith("sqlite"):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    engine = create_history_engine(parse_history_url(url))
    try:
        with engine.connect() as connection:
            found = inspect(connection)
            tables = sorted(found.get_table_names())
            versions = []
            if "alembic_version" in tables:
                versions = sorted(connection.execute(text("SELECT * FROM alembic_version")))
            return (
                {t: sorted(c["name"] for c in found.get_columns(t)) for t in tables},
                [str(v) for v in versions],
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("state", list(STATES))
def test_a_wrong_schema_version_is_refused_untouched(
    history: str, state: str, tmp_path: Path
) -> None:
    _execute(history, STATES[state])
    before = _snapshot(history, tmp_path)
    with pytest.raises(ConfigError) as caught:
        close_history(open_history(history))
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in message and "nothing was written" in message
    assert f"perfgate db stamp {head_revision()}" in message
    assert "restore it from a backup" in message
    assert _snapshot(history, tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("state", list(STATES))
def test_the_command_line_says_it_in_one_line_and_db_stamp_repairs_it(
    history: str, state: str, tmp_path: Path
) -> None:
    _execute(history, STATES[state])
    refused = perfgate_main("history", "list", "--db", history, cwd=tmp_path)
    assert refused.returncode == 64, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("perfgate: error: ")
    stamped = perfgate_main("db", "stamp", head_revision(), "--db", history, cwd=tmp_path)
    assert stamped.returncode == 0, stamped.stdout + stamped.stderr
    assert inspect_history(history).current == head_revision()
    listed = perfgate_main("history", "list", "--db", history, cwd=tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr


def test_db_stamp_refuses_a_revision_the_tables_are_not_at(history: str, tmp_path: Path) -> None:
    _execute(history, STATES["dropped"])
    before = _snapshot(history, tmp_path)
    done = perfgate_main("db", "stamp", FIRST_REVISION, "--db", history, cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert f"its tables are at revision {head_revision()}, not {FIRST_REVISION}" in done.stderr
    assert _snapshot(history, tmp_path) == before


def test_a_history_at_head_missing_a_table_is_refused_naming_it(
    history: str, tmp_path: Path
) -> None:
    """A table dropped by hand: `doctor` and `db upgrade` said the history was fine, and every
    command that read it failed on the missing table (exit 69, no fix); `run` measured first."""
    _execute(history, ["DROP TABLE verdicts"])
    before = _snapshot(history, tmp_path)
    for args in (["db", "upgrade"], ["history", "list"]):
        refused = perfgate_main(*args, "--db", history, cwd=tmp_path)
        assert refused.returncode == 64, refused.stdout + refused.stderr
        assert (
            f"it records schema revision '{head_revision()}', but its table(s) verdicts are "
            "missing; nothing was written; its tables match no revision of this perfgate: "
            "restore it from a backup"
        ) in refused.stderr
    assert _snapshot(history, tmp_path) == before
