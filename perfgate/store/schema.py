"""The history's schema version: Alembic revisions shipped in perfgate/store/migrations.

A history is brought to the newest revision ("head") when it is opened. Concurrent openers do
not race: the upgrade runs in one transaction that first takes the migration lock (an advisory
lock on PostgreSQL; ``BEGIN IMMEDIATE``, the write lock, on SQLite) and then reads the version
again, so exactly one opener migrates and the others find the work done. DDL is transactional on
both backends, so a killed upgrade leaves the old schema, never half of the new one.

The version lives in Alembic's ``alembic_version`` table. A history at a revision this perfgate
does not know was written by a newer perfgate: it is refused, untouched.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from perfgate.errors import ConfigError
from perfgate.store.database import WRITE_LOCK

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FIRST_REVISION = "0001"
# The tables of the first released schema: a history created before migrations existed holds
# exactly these, with no version table, and is adopted as FIRST_REVISION.
FIRST_TABLES = frozenset({"runs", "samples", "phases", "outputs", "verdicts"})
VERSION_TABLE = "alembic_version"
# pg_advisory_xact_lock key: "perfgate" in ASCII, so other applications' keys do not collide.
POSTGRES_LOCK_KEY = int.from_bytes(b"perfgate", "big")


@dataclass(frozen=True)
class SchemaState:
    """Which revision a history is at, and what it holds."""

    current: str | None  # None: no version recorded (a new, pre-migration or foreign database)
    head: str
    tables: frozenset[str]

    @property
    def is_newer(self) -> bool:
        """True when the history was written by a newer perfgate (a revision unknown here)."""
        return self.current is not None and self.current not in known_revisions()

    @property
    def is_foreign(self) -> bool:
        """True when the database holds tables but is not a perfgate history."""
        if self.current is not None or not self.tables:
            return False
        return self.tables != FIRST_TABLES

    @property
    def is_current(self) -> bool:
        return self.current == self.head


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for perfgate's migrations, on `connection` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest schema revision this perfgate knows."""
    head = _scripts().get_current_head()
    assert head is not None, "perfgate ships at least one migration"
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every schema revision this perfgate ships."""
    return frozenset(script.revision for script in _scripts().walk_revisions())


def read_schema_state(connection: Connection) -> SchemaState:
    """Read the history's revision and table names (reads only)."""
    tables = frozenset(inspect(connection).get_table_names())
    current = None
    if VERSION_TABLE in tables:
        current = MigrationContext.configure(connection).get_current_revision()
    return SchemaState(current, head_revision(), tables - {VERSION_TABLE})


def check_schema(state: SchemaState, where: str) -> None:
    """Refuse a history this perfgate must not touch: a newer perfgate's, or not perfgate's."""
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


def upgrade_schema(engine: Engine, where: str) -> SchemaState:
    """Bring the history to head under the migration lock; return the state it was found in."""
    with engine.execution_options(**WRITE_LOCK).begin() as connection:
        _take_migration_lock(connection)
        state = read_schema_state(connection)  # again: another opener may have migrated
        check_schema(state, where)
        if state.is_current:
            return state
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
