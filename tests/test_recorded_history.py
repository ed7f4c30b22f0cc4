"""benchmarks/recorded_history.py: the scripts that read recorded histories refuse a file that
is none, naming it, before printing anything."""

from __future__ import annotations

import importlib
import sqlite3
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.mark.parametrize("script", ["host_phase_pairs", "wall_parts"])
def test_a_file_that_is_no_history_exits_64_naming_it(
    script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(script)
    other = tmp_path / "notes.txt"
    other.write_text("not a database")
    out = tmp_path / "table.md"
    assert module.main([str(other), "--out", str(out)]) == 64
    said = capsys.readouterr()
    assert f"{other}: not a perfgate history with runs, phases" in said.err
    assert said.out == "" and not out.exists()  # nothing printed, nothing written


def test_a_history_without_a_table_a_script_reads_is_refused_naming_the_tables(
    tmp_path: Path,
) -> None:
    """A history of an older schema, or another SQLite file: the check names what it needs."""
    recorded = importlib.import_module("recorded_history")
    db = tmp_path / "h.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE runs (id, fingerprint)")
    why = recorded.missing(db, {"runs": "id, fingerprint", "outputs": "run_id, spec_ids"})
    assert why is not None and why.startswith(f"{db}: not a perfgate history with runs, outputs")
    assert "no such table: outputs" in why
    assert recorded.missing(db, {"runs": "id, fingerprint"}) is None
