"""A history that can be read but not written: refused before anything is measured, and a run
whose record still fails is kept in a file that `perfgate history import` loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.config import HISTORY_NAME_MAX, load_config
from perfgate.errors import ConfigError
from perfgate.store import close_history, list_runs, open_history
from perfgate.store.models import RunRow

from .conftest import TINY_SCENARIO, run_perfgate_while, write_config
from .in_process import perfgate_main
from .lockdown import immutable, require_unshare, with_mounts
from .short_scenario import SHORT_SCENARIO

LONG_NAME = "s" * 201


def _server_logs(folder: Path) -> list[Path]:
    return sorted(folder.glob(".perfgate/runs/**/server-*.log"))


def _runs(url: str) -> list[tuple[int | None, str]]:
    sessions = open_history(url)
    try:
        with sessions() as session:
            return [(r.id, r.measurement.scenario) for r in list_runs(session)]
    finally:
        close_history(sessions)


@pytest.mark.slow
def test_an_immutable_history_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    write_config(tmp_path)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    close_history(open_history(url))
    with immutable(tmp_path / "history.db"):
        done = perfgate_main("run", "--no-gate", cwd=tmp_path)  # refused before pytest starts
    assert done.returncode == 64, done.stdout + done.stderr
    assert f"{tmp_path / 'history.db'}: cannot be opened for writing" in done.stderr
    assert "chattr -i" in done.stderr
    assert _server_logs(tmp_path) == []


@pytest.mark.slow
def test_a_history_on_a_read_only_mount_is_refused_before_any_server_starts(
    tmp_path: Path,
) -> None:
    require_unshare()
    folder = tmp_path / "mounted"
    folder.mkdir()
    write_config(tmp_path, TINY_SCENARIO.replace("sqlite:///history.db", "sqlite:///mounted/h.db"))
    close_history(open_history(f"sqlite:///{folder / 'h.db'}"))
    argv = with_mounts([sys.executable, "-m", "perfgate", "run", "--no-gate"], read_only=[folder])
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 64, done.stdout + done.stderr
    assert "read-only mount" in done.stderr
    assert _server_logs(tmp_path) == []


@pytest.mark.slow
def test_a_history_under_a_file_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder\n")
    write_config(
        tmp_path, TINY_SCENARIO.replace("sqlite:///history.db", "sqlite:///afile/history.db")
    )
    done = perfgate_main("run", "--no-gate", cwd=tmp_path)  # refused before pytest starts
    assert done.returncode == 64, done.stdout + done.stderr
    assert f"{tmp_path / 'afile'}: is a file, so the history" in done.stderr
    assert _server_logs(tmp_path) == []


@pytest.mark.slow
def test_a_sweep_refuses_a_history_it_cannot_write_before_any_server_starts(
    tmp_path: Path,
) -> None:
    write_config(tmp_path)
    close_history(open_history(f"sqlite:///{tmp_path / 'history.db'}"))
    with immutable(tmp_path / "history.db"):
        done = perfgate_main("sweep", "--scenario", "tiny", "--steps", "2,3", cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert "cannot be opened for writing" in done.stderr
    assert _server_logs(tmp_path) == []


def test_a_scenario_name_longer_than_the_history_column_is_refused_at_load(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, TINY_SCENARIO.replace("tiny", LONG_NAME))
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    message = str(caught.value)
    assert message.startswith(f"{config}:scenarios.{LONG_NAME[:20]}")
    assert "201 characters" in message and "at most 200" in message
    assert RunRow.__table__.c.scenario.type.length == HISTORY_NAME_MAX  # where the limit is from
    assert RunRow.__table__.c.profile.type.length == HISTORY_NAME_MAX


def _make_immutable_while_measuring(folder: Path, argv: list[str], line: str) -> tuple[int, str]:
    """Run perfgate; once `line` shows it measuring, make its history immutable till it ends."""
    return run_perfgate_while(folder, argv, line, lambda _: immutable(folder / "history.db"))


def _import_twice(folder: Path, kept: Path) -> None:
    first = perfgate_main("history", "import", str(kept), cwd=folder)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "imported 1 run(s) as #1" in first.stdout
    again = perfgate_main("history", "import", str(kept), cwd=folder)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "imported 0 run(s); 1 already in the history (#1)" in again.stdout


@pytest.mark.slow
def test_a_run_whose_record_fails_is_kept_and_imported_once(tmp_path: Path) -> None:
    write_config(tmp_path, SHORT_SCENARIO)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    close_history(open_history(url))
    # Made immutable while the first server measures: the plain twin's start still lies
    # between that and the record, however short the repeats.
    code, text = _make_immutable_while_measuring(
        tmp_path, ["run", "--no-gate"], "tiny spec: repeat 1 of"
    )
    assert code == 64, text
    assert "history.db: can be read but not written" in text
    assert "perfgate exit code: 64" in text
    assert "run #None" not in text and "report:" not in text
    assert not (tmp_path / "reports" / "index.html").exists()
    (kept,) = sorted((tmp_path / ".perfgate" / "unrecorded").glob("*.jsonl"))
    assert f"perfgate history import {kept}" in text
    assert _runs(url) == []
    _import_twice(tmp_path, kept)
    assert _runs(url) == [(1, "tiny")]
    shown = perfgate_main("history", "show", "1", cwd=tmp_path)
    assert "run #1: tiny" in shown.stdout and "equivalence: 2/2 prompts" in shown.stdout
