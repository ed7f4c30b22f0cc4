"""From a SQLAlchemy URL to an engine, and from a driver's failure to an error a user can act on.

SQLite, in WAL mode: readers never block the writer nor wait for it. perfgate emits BEGIN
itself (sqlite3's own handling begins late and never for DDL): a plain BEGIN for reads, and
``BEGIN IMMEDIATE`` for writes (migrations, recording a run; execution option
``sqlite_begin="IMMEDIATE"``), so a writer takes the write lock up front and waits for it (busy
timeout) instead of failing half-way when another writer committed first.

PostgreSQL: psycopg 3, whatever the URL says (``postgresql://`` alone means psycopg2 to
SQLAlchemy, which perfgate does not ship).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from perfgate.errors import ConfigError, InfrastructureError, PerfgateError

if TYPE_CHECKING:
    from perfgate.config import Config

BUSY_TIMEOUT_S = 30
# Execution options for a SQLite transaction that will write: it takes the write lock at BEGIN.
WRITE_LOCK = {"sqlite_begin": "IMMEDIATE"}
CONNECT_TIMEOUT_S = 10
URL_FIELD = "history URL (--db, --perfgate-db, PERFGATE_DB_URL or [perfgate] history)"
URL_EXAMPLE = "sqlite:///.perfgate/history.db or postgresql://USER@HOST/DB"


def parse_history_url(url: str) -> URL:
    """Parse a history URL; plain ``postgresql://`` means psycopg 3."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"cannot parse {url!r} as a database URL", field=URL_FIELD, fix=f"use {URL_EXAMPLE}"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(
            f"{url!r} is a database in memory: what is recorded there is lost as the command ends",
            field=URL_FIELD,
            fix=f"name a file or a server: {URL_EXAMPLE}",
        )
    return parsed


def describe(url: URL) -> str:
    """The URL as messages show it: the password hidden."""
    return url.render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL; None for other backends and in-memory databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(str(url.database))


def create_history_engine(url: URL) -> Engine:
    """An engine for the history at `url` (nothing is connected or written yet)."""
    path = sqlite_path(url)
    if path is not None:
        if path.is_dir():
            raise ConfigError("is a directory, not a database file", file=path, fix=_FIX_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if url.get_backend_name() == "sqlite":
            return _sqlite_engine(url)
        connect_args = (
            {} if "connect_timeout" in url.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        )
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except (NoSuchModuleError, ModuleNotFoundError) as error:
        raise ConfigError(
            f"no database driver for {url.drivername!r} ({error})",
            field=URL_FIELD,
            fix="for PostgreSQL: pip install 'perfgate[postgresql]'; or use " + URL_EXAMPLE,
        ) from None


_FIX_FILE = "point the history URL at a perfgate history file, or at a new path"
_FIX_FOREIGN = "point the history URL at a perfgate history, or move this file away"


def _sqlite_engine(url: URL) -> Engine:
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    # sqlite3's own transaction handling begins late and never for DDL; perfgate emits BEGIN
    # itself (see _sqlite_begin), so migrations and recorded runs are atomic.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
    if mode is not None:  # None: no transaction at all (autocommit), for PRAGMAs that need it
        connection.exec_driver_sql(f"BEGIN {mode}")


def enable_wal(engine: Engine) -> None:
    """Put a SQLite history in WAL mode (persistent in the file; a no-op once done).

    The switch needs the database to itself, and SQLite answers "locked" at once rather than
    waiting when other connections are reading (as concurrent openers of a new history are):
    retry until the busy timeout.
    """
    if sqlite_path(engine.url) is None:
        return  # PostgreSQL, or an in-memory database
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    with engine.connect().execution_options(sqlite_begin=None) as connection:
        while True:
            try:
                mode = connection.exec_driver_sql("PRAGMA journal_mode=WAL").scalar()
            except OperationalError as error:
                if "locked" not in str(error):
                    raise
                mode = None
            if mode == "wal":
                return
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"{sqlite_path(engine.url)}: cannot switch the history to WAL mode for "
                    f"{BUSY_TIMEOUT_S} s (journal mode {mode or 'locked'}); is it on a network "
                    "file system, or held open by another program?"
                )
            time.sleep(0.02)


def open_error(url: URL, error: Exception) -> PerfgateError:
    """Turn a driver's failure to open or read the history into a one-line perfgate error."""
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    path = sqlite_path(url)
    if path is not None:
        return _sqlite_error(path, error, reason)
    sqlstate = getattr(getattr(error, "orig", None), "sqlstate", None) or ""
    if sqlstate.startswith("28") or sqlstate == "3D000" or _refused_at_login(reason):
        # Refused credentials, or no such database: the URL is wrong, not the server.
        return ConfigError(
            f"{describe(url)} refused the connection: {reason}",
            field=URL_FIELD,
            fix="fix the user, password or database name in the URL",
        )
    if not sqlstate or sqlstate.startswith("08"):  # no answer, or a broken connection
        return InfrastructureError(
            f"cannot reach the history database {describe(url)}: {reason}; "
            "start the server or fix the host and port in the URL"
        )
    return InfrastructureError(f"the history database {describe(url)} failed: {reason}")


def _refused_at_login(reason: str) -> bool:
    # libpq reports a refused login without a SQLSTATE; the server's words are stable.
    refusals = ("does not exist", "authentication failed", "no pg_hba.conf entry")
    return "FATAL" in reason and any(words in reason for words in refusals)


def _sqlite_error(path: Path, error: Exception, reason: str) -> PerfgateError:
    orig = getattr(error, "orig", None)
    if "locked" in reason or "busy" in reason:
        return InfrastructureError(
            f"{path}: the history is locked by another process for more than "
            f"{BUSY_TIMEOUT_S} s ({reason}); wait for it, or stop it"
        )
    if orig is not None and type(orig).__name__ == "DatabaseError":
        # sqlite3.DatabaseError proper (not its OperationalError subclass): not a database,
        # or a damaged one.
        return ConfigError(
            f"is not a usable SQLite database ({reason})", file=path, fix=_FIX_FOREIGN
        )
    if "unable to open" in reason:
        return ConfigError(
            f"cannot open the database file ({reason})",
            file=path,
            fix="check that the folder exists and is writable",
        )
    return InfrastructureError(f"{path}: the history database failed: {reason}")


def resolve_history_url(
    db: str | None,
    config_path: str | None = None,
    *,
    cwd: Path | None = None,
    config: Config | None = None,
    recorded: str | None = None,
) -> str:
    """The history URL: `db` (--db, where $PERFGATE_DB_URL is already applied: Settings reads
    it, the one place that does), else the config's, else the default.

    `recorded` (a session pointer's history) stands in for the config's where given. The
    config is `config` if given (its error, if it has none, is the caller's), else the file at
    `config_path`, else the first one found from `cwd` up; without a config (and no
    `config_path` given) the default file in `cwd`. A config found but wrong (not UTF-8, not
    TOML) is an error, never the default. A relative SQLite path is taken from `cwd` (default:
    the current folder).
    """
    from perfgate.config import DEFAULT_HISTORY, load_config, locate_config, resolve_sqlite_url

    here = cwd or Path.cwd()
    if db:
        return resolve_sqlite_url(db, here)
    if recorded is not None:
        return recorded
    if config is not None:
        return config.history_url
    found = Path(config_path) if config_path else locate_config(here)
    if found is None:  # no configuration: the default history here
        return resolve_sqlite_url(DEFAULT_HISTORY, here)
    return load_config(found).history_url  # a broken one is an error, not the default
