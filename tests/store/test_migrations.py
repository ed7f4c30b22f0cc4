"""Schema migrations: a history from the first released schema upgrades and keeps every row."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData, Table, inspect, text

from perfgate.gate.verdict import Status
from perfgate.store import (
    close_history,
    inspect_history,
    load_run,
    metric_history,
    open_history,
    upgrade_history,
)
from perfgate.store.database import create_history_engine, parse_history_url
from perfgate.store.models import Base
from perfgate.store.schema import FIRST_REVISION, REVISIONS, alembic_config, head_revision

START = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


@contextmanager
def engine_for(url: str) -> Iterator[Engine]:
    engine = create_history_engine(parse_history_url(url))
    try:
        yield engine
    finally:
        engine.dispose()


def migrate(url: str, revision: str, direction: str = "upgrade") -> None:
    with engine_for(url) as engine, engine.begin() as connection:
        getattr(command, direction)(alembic_config(connection), revision)


def first_schema_rows(run: int) -> dict[str, list[dict[str, Any]]]:
    """One run as the first released schema stores it, in plain column values."""
    return {
        "runs": [dict(
            id=run, scenario="eagle3-2step", profile="h200x8", engine="sglang",
            status="regression" if run == 2 else "pass",
            started_at=START + timedelta(days=run), finished_at=START + timedelta(days=run, minutes=3),
            commit=f"c0ffee{run}", branch="main", pr=str(40 + run), ci_url=f"https://ci/{run}",
            dirty=False, equivalent=True, fingerprint={"gpu": "H200", "gpu_count": "8"},
            config={"steps": 2}, servers={"spec": {"command": "python -m sglang.launch_server",
                                                   "info": {"version": "0.5.1"}, "log": "s.log"}},
        )],
        "samples": [
            dict(run_id=run, mode=mode, metric=metric, repeat=r, value=value + run + r / 10)
            for mode, metric, value in (("spec", "output_tok_s", 94.0), ("plain", "output_tok_s", 90.0),
                                        ("spec", "verify_ms", 30.0), ("spec", "speedup", 1.04))
            for r in range(3)
        ],
        "phases": [
            dict(run_id=run, mode="spec", phase=phase, repeat=r, cycles=40, median_ms=ms,
                 mean_ms=ms * 1.01, p90_ms=ms * 1.2)
            for phase, ms in (("draft", 1.2), ("verify", 30.0), ("cycle", 32.0)) for r in range(3)
        ],
        "outputs": [dict(run_id=run, prompt_index=0, spec_ids=[5, 6, 7], plain_ids=[5, 6, 7],
                         matched=True, prefix_len=3)],
        "verdicts": [dict(run_id=run, metric="output_tok_s", status="pass", message="+0.1%",
                          baseline=94.0, current=94.1, change=0.001, ci_low=-0.01, ci_high=0.01,
                          tolerance=0.03)],
    }  # fmt: skip


def fill_first_schema(url: str, runs: int) -> None:
    """Write `runs` runs through the tables as revision 0001 has them (reflected, not models)."""
    with engine_for(url) as engine, engine.begin() as connection:
        tables = MetaData()
        tables.reflect(connection)
        for run in range(1, runs + 1):
            for name, rows in first_schema_rows(run).items():
                connection.execute(Table(name, tables).insert(), rows)


def test_a_first_schema_history_upgrades_and_keeps_every_row(db_url: str) -> None:
    migrate(db_url, FIRST_REVISION)
    assert inspect_history(db_url).current == FIRST_REVISION
    fill_first_schema(db_url, runs=3)

    before = upgrade_history(db_url)
    assert before.current == FIRST_REVISION and inspect_history(db_url).is_current
    sessions = open_history(db_url)
    with sessions() as session:
        for run in (1, 2, 3):
            record = load_run(session, run)
            m = record.measurement
            assert (record.status, record.context.commit, record.context.pr) == (
                Status.REGRESSION if run == 2 else Status.PASS, f"c0ffee{run}", str(40 + run),
            )  # fmt: skip
            assert m.started_at == START + timedelta(days=run)
            assert m.spec.samples["output_tok_s"] == tuple(94.0 + run + r / 10 for r in range(3))
            assert m.plain.samples["output_tok_s"] == tuple(90.0 + run + r / 10 for r in range(3))
            assert [p.median_ms for p in m.spec.phases] == [1.2] * 3 + [30.0] * 3 + [32.0] * 3
            assert m.spec.outputs == ((5, 6, 7),) and m.equivalence.ok
            assert m.spec.server_info == {"version": "0.5.1"} and m.fingerprint["gpu"] == "H200"
            assert record.verdicts[0].current == 94.1
        history = metric_history(session, "eagle3-2step", "h200x8", "verify_ms")
    close_history(sessions)
    assert [p.run_id for p in history] == [1, 2, 3]
    assert history[1].values == (32.0, 32.1, 32.2)


def test_a_history_from_before_migrations_is_adopted(db_url: str) -> None:
    """perfgate 0.1 created the tables without a version table: they are stamped, then upgraded."""
    migrate(db_url, FIRST_REVISION)
    fill_first_schema(db_url, runs=2)
    with engine_for(db_url) as engine, engine.begin() as connection:
        connection.execute(text("DROP TABLE alembic_version"))
    assert inspect_history(db_url).current is None

    sessions = open_history(db_url)
    with sessions() as session:
        assert load_run(session, 2).context.commit == "c0ffee2"
    close_history(sessions)
    assert inspect_history(db_url).current == head_revision()


def test_the_models_match_the_migrated_schema(db_url: str) -> None:
    close_history(open_history(db_url))
    with engine_for(db_url) as engine, engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_every_revision_downgrades_and_upgrades_again(db_url: str) -> None:
    close_history(open_history(db_url))
    migrate(db_url, "base", "downgrade")
    with engine_for(db_url) as engine, engine.connect() as connection:
        assert _tables(connection) <= {"alembic_version"}
    migrate(db_url, "head")
    assert inspect_history(db_url).is_current


def test_the_named_revisions_are_the_migrations_folders_oldest_first() -> None:
    # A history at head opens without importing Alembic, by the revisions schema.py names:
    # a migration added to the folder but not to REVISIONS would leave histories unmigrated.
    scripts = ScriptDirectory.from_config(alembic_config())
    chain = [script.revision for script in scripts.walk_revisions()]
    assert tuple(reversed(chain)) == REVISIONS
    assert head_revision() == scripts.get_current_head()


def test_a_history_at_head_opens_without_importing_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    close_history(open_history(url))  # created and migrated here
    code = (
        "import sys\n"
        "from perfgate.store import close_history, open_history\n"
        f"close_history(open_history({url!r}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())
