"""The parts of `probe_write`: whether a run could write to the history, proven by writing.

Nothing a probe does persists: a temporary file is created and removed, a file is opened for
writing and closed unwritten, and a write transaction is rolled back.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import URL, Connection, text
from sqlalchemy.exc import SQLAlchemyError

from perfgate.errors import ConfigError, PerfgateError
from perfgate.files import refusal_hint, writable_folder
from perfgate.store.database import URL_FIELD, describe, open_error, sqlite_path
from perfgate.store.schema import VERSION_TABLE, SchemaState

ELSEWHERE = "or point the history elsewhere with --db or PERFGATE_DB_URL"
PROBE_TABLE = "perfgate_write_probe"
# SQLSTATEs of a server that lets this user read but not write: a read-only transaction (a
# replica, default_transaction_read_only) and a missing privilege.
READ_ONLY_STATES = ("25006", "42501")


def probe_folder(path: Path) -> Path:
    """Create and remove a temporary file where ``path`` would be created; return that folder.

    For a file that does not exist yet, the folder is its nearest existing ancestor (a run
    creates the folders between).
    """
    return writable_folder(path.parent, f"the history {path}", ELSEWHERE)


def probe_file(path: Path) -> None:
    """Open an existing history file for writing (nothing is written), then its folder.

    Before SQLite does: SQLite falls back to reading a file it cannot write, and a read-only
    connection to a WAL history leaves -wal and -shm files behind.
    """
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as error:
        raise _refused(path, f"cannot be opened for writing ({error.strerror})", error) from None
    probe_folder(path)  # SQLite writes its -wal, -shm or -journal files beside the history


def write_and_roll_back(connection: Connection, state: SchemaState) -> str:
    """Make the first kind of write a run will make, in a transaction rolled back; say which.

    A history at a perfgate schema revision gets an update of its version row that changes
    nothing; one whose schema a run must create or adopt gets a table created (DDL is
    transactional on SQLite and PostgreSQL). ``connection`` holds no transaction yet.
    """
    transaction = connection.begin()
    try:
        if state.current is not None:
            connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = version_num"))
            return "a write to its schema version, rolled back"
        connection.execute(text(f"CREATE TABLE {PROBE_TABLE} (id INTEGER)"))
        return "a table created and rolled back (a run creates the schema)"
    finally:
        transaction.rollback()


def write_error(url: URL, error: SQLAlchemyError) -> PerfgateError:
    """A failed write as an error a user can act on: 64 for what refuses writing, else as read."""
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    path = sqlite_path(url)
    if path is not None and ("readonly" in reason or "unable to open" in reason):
        return ConfigError(
            f"can be read but not written ({reason})",
            file=path,
            fix=f"make the file and its folder writable (a read-only mount, an immutable file, "
            f"their owner or mode), {ELSEWHERE}",
        )
    sqlstate = getattr(getattr(error, "orig", None), "sqlstate", None) or ""
    if path is None and sqlstate in READ_ONLY_STATES:
        return ConfigError(
            f"{describe(url)} can be read but not written ({reason})",
            field=URL_FIELD,
            fix="connect as a user who may write (INSERT, UPDATE, DELETE; CREATE for schema "
            f"upgrades), to the primary server rather than a read-only replica, {ELSEWHERE}",
        )
    return open_error(url, error)


def _refused(where: Path, problem: str, error: OSError) -> ConfigError:
    return ConfigError(problem, file=where, fix=f"{refusal_hint(error)}, {ELSEWHERE}")
