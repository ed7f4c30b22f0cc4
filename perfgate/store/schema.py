"""The history's schema version: Alembic revisions shipped in perfgate/store/migrations.

A history is brought to the newest revision ("head") when it is opened. Concurrent openers do
not race: the upgrade runs in one transaction that first takes the migration lock (an advisory
lock on PostgreSQL; ``BEGIN IMMEDIATE``, the write lock, on SQLite) and then reads the version
again, so exactly one opener migrates and the others find the work done. DDL is transactional on
both backends, so a killed upgrade leaves the old schema, never half of the new one.

The version lives in Alembic's ``alembic_version`` table. A history at a revision this perfgate
does not know was written by a newer perfgate: it is refused, untouched.

Alembic is imported only to migrate, stamp or read a revision's shape: a history already at
head is opened without it (its import is a third of a ``perfgate`` process's start-up). So the
revisions are also named here, in ``REVISIONS``, and a test holds them to the migrations folder.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, inspect, text

from perfgate.errors import ConfigError
from perfgate.store.database import WRITE_LOCK
from perfgate.store.models import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# Every revision in migrations/versions, oldest first (tests/store/test_migrations.py reads the
# folder with Alembic and fails where this differs): a new migration adds its revision here.
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006")
FIRST_REVISION = REVISIONS[0]
# The tables of the first released schema: a history created before migrations existed holds
# exactly these, with no version table, and is adopted as FIRST_REVISION.
FIRST_TABLES = frozenset({"runs", "samples", "phases", "outputs", "verdicts"})
# Every table of this perfgate's schema (its models): a database without a recorded revision
# is a perfgate history only if it holds the first schema's tables and none but these.
HISTORY_TABLES = frozenset(Base.metadata.tables)
VERSION_TABLE = "alembic_version"
# pg_advisory_xact_lock key: "perfgate" in ASCII, so other applications' keys do not collide.
POSTGRES_LOCK_KEY = int.from_bytes(b"perfgate", "big")


# A schema's shape: (table, "column" or "index", name) of everything its revisions create.
Shape = frozenset[tuple[str, str, str]]


@dataclass(frozen=True)
class SchemaState:
    """Which revision a history is at, and what it holds."""

    current: str | None  # None: no version recorded (a new, pre-migration or foreign database)
    head: str
    tables: frozenset[str]
    version_rows: tuple[str, ...] = ()  # the rows of alembic_version, as read
    version_table: bool = False  # whether there is an alembic_version table at all
    # The revisions whose tables, columns and indexes the history has (oldest first); read
    # only when the history is not plainly at head (None: not read).
    tables_at: tuple[str, ...] | None = None

    @property
    def version_mismatch(self) -> str | None:
        """What is wrong with the recorded revision, in words; None when it can be trusted.

        A history records one revision, that of its tables. One created before revisions
        existed records none and holds the first schema's tables: it is adopted, not refused.
        """
        if len(self.version_rows) > 1:
            rows = ", ".join(repr(row) for row in self.version_rows)
            return f"its {VERSION_TABLE} table holds {len(self.version_rows)} revisions ({rows})"
        if self.tables_at is None or self.is_newer or self.is_foreign:
            return None
        if self.current is None:
            if not self.tables or FIRST_REVISION in self.tables_at:
                return None
            how = "is empty" if self.version_table else "is missing"
            return f"its schema revision is not recorded ({VERSION_TABLE} {how})"
        if self.current not in self.tables_at:
            missing = sorted(HISTORY_TABLES - self.tables) if self.is_current else []
            if missing:
                return (
                    f"it records schema revision {self.current!r}, but its table(s) "
                    f"{', '.join(missing)} are missing"
                )
            return f"it records schema revision {self.current!r}, which its tables are not at"
        return None

    @property
    def is_newer(self) -> bool:
        """True when the history was written by a newer perfgate (a revision unknown here)."""
        return self.current is not None and self.current not in known_revisions()

    @property
    def is_foreign(self) -> bool:
        """True when the database holds tables but is not a perfgate history."""
        if self.current is not None or not self.tables:
            return False
        return not FIRST_TABLES <= self.tables <= HISTORY_TABLES

    @property
    def is_current(self) -> bool:
        return self.current == self.head


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for perfgate's migrations, on `connection` when given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest schema revision this perfgate knows."""
    return REVISIONS[-1]


def known_revisions() -> frozenset[str]:
    """Every schema revision this perfgate ships."""
    return frozenset(REVISIONS)


def read_schema_state(connection: Connection, *, shape: bool = False) -> SchemaState:
    """Read the history's revision and table names (reads only).

    Which revisions its tables are at is read too when the history is not plainly at head
    (no version, or another, or more than one, or head's tables not all there), or when
    `shape` asks for it.
    """
    tables = frozenset(inspect(connection).get_table_names())
    rows: tuple[str, ...] = ()
    if VERSION_TABLE in tables:
        found = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
        rows = tuple(str(row[0]) for row in found)
    current = rows[0] if len(rows) == 1 else None
    state = SchemaState(
        current, head_revision(), tables - {VERSION_TABLE}, rows, VERSION_TABLE in tables
    )
    lost = state.is_current and bool(HISTORY_TABLES - state.tables)  # a table dropped by hand
    if shape or lost or (state.tables and not state.is_current and not state.is_newer):
        state = replace(state, tables_at=revisions_of(read_shape(connection)))
    return state


def read_shape(connection: Connection) -> Shape:
    """The tables, columns and indexes of the database (the version table left out)."""
    found = inspect(connection)
    items: set[tuple[str, str, str]] = set()
    for table in found.get_table_names():
        if table != VERSION_TABLE:
            items |= {(table, "column", c["name"]) for c in found.get_columns(table)}
            items |= {(table, "index", str(i["name"])) for i in found.get_indexes(table)}
    return frozenset(items)


def revisions_of(shape: Shape) -> tuple[str, ...]:
    """The revisions whose migrations make exactly `shape`, oldest first."""
    return tuple(revision for revision, made in revision_shapes().items() if made == shape)


@functools.cache
def revision_shapes() -> dict[str, Shape]:
    """Each revision's shape, oldest first, as its migrations make it in an empty database."""
    from alembic import command

    engine = create_engine("sqlite://")  # in memory, one connection
    shapes = {}
    try:
        with engine.begin() as connection:
            config = alembic_config(connection)
            for revision in REVISIONS:
                command.upgrade(config, revision)
                shapes[revision] = read_shape(connection)
    finally:
        engine.dispose()
    return shapes


def check_schema(state: SchemaState, where: str) -> None:
    """Refuse a history this perfgate must not touch: a newer perfgate's, one not perfgate's,
    or one whose recorded revision is not that of its tables."""
    mismatch = state.version_mismatch
    if mismatch is not None:
        raise ConfigError(
            f"{mismatch}; nothing was written", file=where, fix=_stamp_fix(state.tables_at)
        )
    if state.is_newer:
        raise ConfigError(
            f"the history is at schema revision {state.current!r}, written by a newer perfgate "
            f"(this one knows revisions up to {state.head!r}); nothing was written",
            file=where,
            fix="upgrade perfgate (pip install -U perfgate), or point the history URL elsewhere",
        )
    if state.is_foreign:
        names = ", ".join(sorted(state.tables)[:5])
        raise ConfigError(
            f"is not a perfgate history (it holds other tables: {names}); nothing was written",
            file=where,
            fix="point the history URL at a perfgate history, or at a new file or database",
        )


def _stamp_fix(tables_at: tuple[str, ...] | None) -> str:
    if tables_at:
        return (
            f"its tables are at revision {tables_at[-1]}: if nothing else in it was changed by "
            f"hand, record that with `perfgate db stamp {tables_at[-1]}`; otherwise restore it "
            "from a backup"
        )
    return (
        "its tables match no revision of this perfgate: restore it from a backup, or point the "
        "history URL elsewhere"
    )


def stamp_schema(engine: Engine, revision: str, where: str) -> SchemaState:
    """Record `revision` as the history's only one, if its tables are at it; return the state
    it was found in. Nothing else is changed."""
    from alembic import command

    if revision not in known_revisions():
        raise ConfigError(
            f"unknown schema revision {revision!r}",
            field="REVISION",
            fix=f"use one of {', '.join(sorted(known_revisions()))}",
        )
    with engine.execution_options(**WRITE_LOCK).begin() as connection:
        _take_migration_lock(connection)
        state = read_schema_state(connection, shape=True)
        if revision not in (state.tables_at or ()):
            at = f"at revision {state.tables_at[-1]}" if state.tables_at else "at no revision"
            raise ConfigError(
                f"its tables are {at}, not {revision}; nothing was written",
                file=where,
                fix=_stamp_fix(state.tables_at),
            )
        command.stamp(alembic_config(connection), revision, purge=True)
    return state


def upgrade_schema(engine: Engine, where: str) -> SchemaState:
    """Bring the history to head under the migration lock; return the state it was found in."""
    with engine.execution_options(**WRITE_LOCK).begin() as connection:
        _take_migration_lock(connection)
        state = read_schema_state(connection)  # again: another opener may have migrated
        check_schema(state, where)
        if state.is_current:
            return state
        from alembic import command

        config = alembic_config(connection)
        if state.current is None and state.tables:  # created before migrations existed
            command.stamp(config, FIRST_REVISION)
        command.upgrade(config, "head")
    return state


def _take_migration_lock(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # Held until this transaction ends: commit, rollback, or the opener's death.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": POSTGRES_LOCK_KEY})
    # SQLite: the transaction began IMMEDIATE, so it holds the write lock already.
