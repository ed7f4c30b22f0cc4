"""benchmarks/portable_paths.py: a record read on other machines names no path of this one."""

from __future__ import annotations

import gzip
import importlib
import sqlite3
import sys
import tarfile
from pathlib import Path

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_a_state_archive_is_rewritten_member_by_member(tmp_path: Path) -> None:
    """A proof's state.tgz (its history, its tables, a binary file) comes out with the state
    folder's path replaced in every text member and in the history, members in their order,
    the binary one byte for byte."""
    portable_paths = importlib.import_module("portable_paths")
    state = tmp_path / "state"
    (state / "baselines").mkdir(parents=True)
    (state / "baselines" / "plan.md").write_text(f"history at {state}/history.db\n")
    with sqlite3.connect(state / "history.db") as db:
        db.execute("CREATE TABLE runs (id INTEGER, command TEXT)")
        db.execute("INSERT INTO runs VALUES (1, ?)", (f"python3 -m perfgate --db {state}/h.db",))
    db.close()
    binary = bytes(range(256)) * 4
    (state / "weights.bin").write_bytes(binary)
    archive = tmp_path / "state.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(state, arcname=".")
        before = [m.name for m in tar.getmembers()]

    assert portable_paths.main([f"--replace={state}=STATE", str(archive)]) == 0

    with tarfile.open(archive) as tar:
        assert [m.name for m in tar.getmembers()] == before
        files = [m for m in tar.getmembers() if m.isfile()]
        read = {m.name: tar.extractfile(m).read() for m in files}  # type: ignore[union-attr]
    assert read["./baselines/plan.md"] == b"history at STATE/history.db\n"
    assert read["./weights.bin"] == binary
    history = tmp_path / "history.db"
    history.write_bytes(read["./history.db"])
    with sqlite3.connect(history) as db:
        assert db.execute("SELECT command FROM runs").fetchone() == (
            "python3 -m perfgate --db STATE/h.db",
        )
    db.close()
    assert str(tmp_path) not in gzip.decompress(archive.read_bytes()).decode("latin-1")


def test_a_history_in_write_ahead_mode_is_packed_rewritten(tmp_path: Path) -> None:
    """perfgate's histories write ahead (journal_mode=wal): the rewrite must reach the file
    that goes back into the archive, not stay in a -wal file beside it."""
    portable_paths = importlib.import_module("portable_paths")
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "history.db") as db:
        db.execute("PRAGMA journal_mode=wal")
        db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, servers TEXT)")
        for run in range(50):
            db.execute("INSERT INTO runs VALUES (?, ?)", (run, f"{state}/runs/{run}/spec.log"))
    db.close()
    archive = tmp_path / "state.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(state, arcname=".")

    assert portable_paths.main([f"--replace={state}=STATE", str(archive)]) == 0

    with tarfile.open(archive) as tar:
        names = tar.getnames()
        packed = tar.extractfile("./history.db").read()  # type: ignore[union-attr]
    assert "./history.db-wal" not in names
    assert str(state).encode() not in packed
    history = tmp_path / "history.db"
    history.write_bytes(packed)
    with sqlite3.connect(history) as db:
        assert db.execute("SELECT servers FROM runs WHERE id = 7").fetchone() == (
            "STATE/runs/7/spec.log",
        )
    db.close()
