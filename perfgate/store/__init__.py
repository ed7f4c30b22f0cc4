"""The history database: dataclasses in, dataclasses out. Functions take a session.

Transactions are framed at the edge (`with sessions.begin() as session:` in the CLI and the
plugin), so a run is recorded whole or not at all. Opening a history brings its schema to this
perfgate's revision first (see schema.py); failures become one-line perfgate errors with the
documented exit codes: 64 for a URL, file or database that is wrong (not a database, not
perfgate's, from a newer perfgate), 69 for a server that cannot be reached. Only the commands
that record runs create a history; those that read it open an existing one, or say there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from perfgate.errors import ConfigError, PerfgateError
from perfgate.store.columns import HistoryColumns, history_columns
from perfgate.store.database import (
    URL_FIELD,
    WRITE_LOCK,
    create_history_engine,
    describe,
    enable_wal,
    open_error,
    parse_history_url,
    resolve_history_url,
    sqlite_path,
)
from perfgate.store.queries import (
    MetricPoint,
    RunFilter,
    comparable_runs,
    iter_runs,
    last_runs,
    list_runs,
    load_run,
    load_runs,
    metric_history,
    recorded_names,
    run_ids,
)
from perfgate.store.records import record_run
from perfgate.store.schema import (
    SchemaState,
    check_schema,
    head_revision,
    read_schema_state,
    stamp_schema,
    upgrade_schema,
)
from perfgate.store.write_check import probe_file, probe_folder, write_and_roll_back, write_error

__all__ = [
    "HistoryColumns",
    "MetricPoint",
    "RunFilter",
    "SchemaState",
    "check_history",
    "close_history",
    "comparable_runs",
    "database_errors",
    "history",
    "history_columns",
    "inspect_history",
    "iter_runs",
    "last_runs",
    "list_runs",
    "load_run",
    "load_runs",
    "metric_history",
    "missing_history",
    "open_existing_history",
    "open_history",
    "probe_write",
    "record_run",
    "recorded_names",
    "resolve_history_url",
    "run_ids",
    "stamp_history",
    "upgrade_history",
]

T = TypeVar("T")


@contextmanager
def history(
    url: str, *, existing: bool = False, writing: bool = False
) -> Iterator[sessionmaker[Session]]:
    """The history at a SQLAlchemy URL, opened for the block; its engine disposed after it.

    Opening brings the schema to this perfgate's revision (see `open_history`); with
    `existing`, a command that only reads refuses a history that is not there and creates
    nothing (see `open_existing_history`). A database failure inside the block (SQLAlchemyError,
    OSError) becomes a one-line perfgate error naming the database: exit 64 for a URL, file or
    database that is wrong, 69 for a server that cannot be reached; with `writing`, a history
    that refuses the block's writes is bad input (64), as `probe_write` says it.
    """
    try:
        sessions = open_existing_history(url) if existing else open_history(url)
    except OSError as error:  # the file or its folder, before the driver saw it
        raise _file_error(url, error) from None
    engine = sessions.kw["bind"]
    try:
        yield sessions
    except SQLAlchemyError as error:
        raise (write_error if writing else open_error)(engine.url, error) from None
    finally:
        engine.dispose()


def _file_error(url: str, error: OSError) -> ConfigError:
    parsed = parse_history_url(url)
    path = sqlite_path(parsed)
    return ConfigError(
        f"cannot open the history ({error.strerror or error})",
        file=path,
        field=None if path is not None else URL_FIELD,
        fix="check that its folder exists and is writable, or point the history URL elsewhere",
    )


def open_history(url: str) -> sessionmaker[Session]:
    """Open (creating if needed) the history at a SQLAlchemy URL; return a session factory.

    For the commands that record runs (and their tests); a command that only reads opens the
    history with `open_existing_history`.

    The schema is brought to this perfgate's revision first. Raises ConfigError (exit 64) for a
    wrong URL, file or database, InfrastructureError (exit 69) for an unreachable server.
    """
    engine, state = _connect(url)
    return _sessions(engine, state)


def open_existing_history(url: str) -> sessionmaker[Session]:
    """Open the history at a URL for a command that only reads it: create no file nor table.

    Raises ConfigError (exit 64) when there is no history there (see `missing_history`), and
    otherwise as `open_history` does; an older schema is still brought to this revision.
    """
    path = sqlite_path(parse_history_url(url))
    if path is not None and not path.exists():
        raise missing_history(url)  # before connecting: SQLite would create the file
    engine, state = _connect(url)
    if state.current is None and not state.tables:
        engine.dispose()
        raise missing_history(url)
    return _sessions(engine, state)


def missing_history(url: str) -> ConfigError:
    """The error for reading a history that is not there: no file, or a database of no table."""
    parsed = parse_history_url(url)
    path = sqlite_path(parsed)
    where = str(path) if path is not None else describe(parsed)
    empty = "" if path is not None and not path.exists() else " (it holds no table yet)"
    return ConfigError(
        f"no history at {where}{empty}",
        field=URL_FIELD,
        fix="point it at an existing history, or record one first with `perfgate run`",
    )


def _sessions(engine: Engine, state: SchemaState) -> sessionmaker[Session]:
    """A session factory on `engine`, the schema brought to this perfgate's revision first."""
    if not state.is_current:
        _guarded(engine, lambda: upgrade_schema(engine, _where(engine)))
    _guarded(engine, lambda: enable_wal(engine))
    return sessionmaker(engine, expire_on_commit=False)


def upgrade_history(url: str) -> SchemaState:
    """Bring the history to this perfgate's schema; return the state it was found in."""
    engine, state = _connect(url)
    try:
        if not state.is_current:
            state = _guarded(engine, lambda: upgrade_schema(engine, _where(engine)))
        _guarded(engine, lambda: enable_wal(engine))
    finally:
        engine.dispose()
    return state


def stamp_history(url: str, revision: str) -> SchemaState:
    """Record `revision` as the history's schema revision, if its tables are at it (the repair
    of a lost, doubled or stale version); return the state it was found in."""
    engine, state = _connect(url, check=False)
    try:
        if state.is_newer:
            check_schema(state, _where(engine))
        return _guarded(engine, lambda: stamp_schema(engine, revision, _where(engine)))
    finally:
        engine.dispose()


def inspect_history(url: str) -> SchemaState:
    """The history's schema state, read without writing anything (nor creating a file).

    Unlike opening, this does not refuse a newer or foreign database: it reports what it found.
    """
    path = sqlite_path(parse_history_url(url))
    if path is not None and not path.exists():
        return SchemaState(None, head_revision(), frozenset())
    engine, state = _connect(url, check=False)
    engine.dispose()
    return state


def check_history(url: str) -> None:
    """Refuse, before anything is measured, a history this perfgate must not write to.

    Writes nothing and creates no file; a history that does not exist yet is fine.
    """
    path = sqlite_path(parse_history_url(url))
    if path is not None and not path.exists():
        return
    engine, _ = _connect(url)
    engine.dispose()


def probe_write(url: str) -> str:
    """Prove that a run can write to the history at `url`, leaving nothing behind; say how.

    A SQLite file is opened for writing and a temporary file is made in its folder (for a file
    that does not exist yet, in the folder it would be created in: nothing more is tried).
    Then a real write transaction is rolled back: on SQLite it begins IMMEDIATE, taking the
    write lock (see perfgate.store.write_check.write_and_roll_back for the statement).

    Raises ConfigError (exit 64) for a file, folder or database user that refuses writing and
    for a history perfgate must not touch; InfrastructureError (exit 69) for a server that
    cannot be reached or a history that another process holds locked.
    """
    path = sqlite_path(parse_history_url(url))
    if path is not None and not path.exists():
        folder = probe_folder(path)
        return f"not created yet; {folder} is writable, so the first run creates it"
    if path is not None:
        probe_file(path)
    engine, state = _connect(url)
    try:
        with engine.execution_options(**WRITE_LOCK).connect() as connection:
            return write_and_roll_back(connection, state)
    except SQLAlchemyError as error:
        raise write_error(engine.url, error) from None
    finally:
        engine.dispose()


@contextmanager
def database_errors(sessions: sessionmaker[Session], *, writing: bool = False) -> Iterator[None]:
    """Word a database failure inside the block (a lost server, say) as a perfgate error.

    With `writing`, a history that refuses the block's writes is bad input (64), as
    `probe_write` says it.
    """
    try:
        yield
    except SQLAlchemyError as error:
        bind = sessions.kw.get("bind")
        if not isinstance(bind, Engine):
            raise
        raise (write_error if writing else open_error)(bind.url, error) from None


def close_history(sessions: sessionmaker[Session]) -> None:
    """Close the connections a session factory from `open_history` holds."""
    bind = sessions.kw.get("bind")
    if isinstance(bind, Engine):
        bind.dispose()


def _connect(url: str, check: bool = True) -> tuple[Engine, SchemaState]:
    """An engine, and the schema state it found; refuses a history it must not touch.

    A SQLite file that connecting will create is created only where a run could create it (see
    `probe_write`): a file in its way or a folder that takes no file is bad input (64)."""
    parsed = parse_history_url(url)
    path = sqlite_path(parsed)
    if path is not None and not path.exists():
        probe_folder(path)
    engine = create_history_engine(parsed)

    def read() -> SchemaState:
        with engine.connect() as connection:
            return read_schema_state(connection)

    state = _guarded(engine, read)
    if not check:
        return engine, state
    try:
        check_schema(state, _where(engine))
    except PerfgateError:
        engine.dispose()
        raise
    return engine, state


def _guarded(engine: Engine, action: Callable[[], T]) -> T:
    """Run `action`; a database failure becomes a one-line perfgate error (engine disposed)."""
    try:
        return action()
    except SQLAlchemyError as error:
        engine.dispose()
        raise open_error(engine.url, error) from None
    except PerfgateError:
        engine.dispose()
        raise


def _where(engine: Engine) -> str:
    path = sqlite_path(engine.url)
    return str(path) if path is not None else describe(engine.url)
