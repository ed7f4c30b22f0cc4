"""benchmarks/replan.py: today's plan model judged on recorded plans, reading a record without
changing it."""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from pathlib import Path

from alembic import command

from perfgate.store import close_history, open_history
from perfgate.store.database import create_history_engine, parse_history_url
from perfgate.store.schema import REVISIONS, alembic_config

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
replan = importlib.import_module("replan")


def test_a_record_of_an_older_schema_is_read_and_keeps_its_bytes(tmp_path: Path) -> None:
    # A committed record is of the schema of its day; opening it as perfgate does would bring it
    # to this revision, rewriting the file in the repository.
    url = f"sqlite:///{tmp_path / 'history.db'}"
    close_history(open_history(url))
    engine = create_history_engine(parse_history_url(url))
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), REVISIONS[-2])
    engine.dispose()
    before = (tmp_path / "history.db").read_bytes()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert replan.main(["--db", url]) == 64
    assert "no plan's profiled run in it" in err.getvalue()
    assert (tmp_path / "history.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.db"]
