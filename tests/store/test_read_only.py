"""Commands that only read the history open an existing one: they create no folder, file or table.

Only the commands that record (`perfgate run`, `perfgate sweep`) and `perfgate db upgrade`
create a history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.store import inspect_history
from perfgate.store.database import URL_FIELD

from ..conftest import TINY_SCENARIO, write_config

READERS = [
    ["history", "list"],
    ["history", "show", "1"],
    ["history", "export", "--out", "runs.jsonl"],
    ["report", "--out", "r.html"],
    ["gate", "--run", "1"],
    ["baseline", "update", "--run", "1", "--approved-by", "alice", "--reason", "faster"],
    ["db", "current"],
    ["ci", "approve", "--runs", "latest", "--approved-by", "alice", "--reason", "faster"],
]
FIX = "point it at an existing history, or record one first with `perfgate run`"


@pytest.mark.parametrize("named_by", ["--db", "--db relative", "PERFGATE_DB_URL", "config"])
@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_reader_refuses_a_missing_history_and_creates_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    named_by: str,
) -> None:
    missing = tmp_path / "nowhere" / "history.db"
    config = TINY_SCENARIO.replace("sqlite:///history.db", "sqlite:///nowhere/history.db")
    write_config(tmp_path, config)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PERFGATE_DB_URL", raising=False)
    argv = list(command)
    if named_by == "--db":
        argv += ["--db", f"sqlite:///{missing}"]
    elif named_by == "--db relative":
        argv += ["--db", "sqlite:///nowhere/history.db"]
    elif named_by == "PERFGATE_DB_URL":
        monkeypatch.setenv("PERFGATE_DB_URL", f"sqlite:///{missing}")
    assert main(argv) == 64
    assert (
        capsys.readouterr().err == f"perfgate: error: {URL_FIELD}: no history at {missing}; {FIX}\n"
    )
    assert not missing.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perfgate.toml"]  # nor any output


@pytest.mark.parametrize("command", [["history", "list"], ["db", "current"]], ids=" ".join)
def test_a_reader_refuses_an_empty_database_and_creates_no_table(
    db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    if db_url.startswith("sqlite"):
        (tmp_path / "history.db").touch()  # an empty file: SQLite's empty database
    assert main([*command, "--db", db_url]) == 64
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: error: {URL_FIELD}: no history at ")
    assert err.endswith(f" (it holds no table yet); {FIX}\n") and len(err.splitlines()) == 1
    assert not inspect_history(db_url).tables


def test_ci_summary_notes_a_missing_history_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "history.db"
    pointer = tmp_path / "session.json"
    history = f"sqlite:///{missing}"
    document = {"schema": 1, "exit_code": 0, "history": history, "final_runs": {"tiny": 1}}
    pointer.write_text(json.dumps(document), encoding="utf-8")
    assert main(["ci", "summary", "--session", str(pointer)]) == 0
    assert f"no history at {missing}" in capsys.readouterr().out
    assert not missing.parent.exists()
