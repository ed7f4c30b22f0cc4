"""Ending `perfgate run` in any way ends its run: no process outlives it, nothing is recorded.

Each test starts `perfgate run` as a user would, waits until its first server is serving, then
signals it the way a caller may: the process alone (`kill PID`, `kill -9 PID`, as
`subprocess.run(timeout=)` and many CI cancellations do, or SIGINT), or its whole process group
(`timeout`, Ctrl-C on a terminal). Every process it had started must then end, and the run it
was measuring must not be recorded nor reported afterwards.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.engines.supervise import _processes, descendants

from .conftest import run_perfgate, write_config

pytestmark = pytest.mark.slow

SERVING_LINE = "tiny plain: repeat 1 of"
WAIT_S = 120.0


def _start_run(folder: Path) -> tuple[subprocess.Popen[bytes], Path]:
    output = folder / "output.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGATE_DB_URL", "CI")}
    with output.open("wb") as out:  # a file, not a pipe: a process left behind never blocks
        process = subprocess.Popen(
            [sys.executable, "-m", "perfgate", "run"],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, as a shell job or a CI step has
        )
    return process, output


def _wait_for_line(process: subprocess.Popen[bytes], output: Path, line: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while line not in output.read_text(errors="replace"):
        assert process.poll() is None, f"perfgate run ended early:\n{output.read_text()}"
        assert time.monotonic() < deadline, f"no {line!r} within {WAIT_S:.0f} s"
        time.sleep(0.05)


def _living(pids: list[int]) -> list[int]:
    alive = {pid for pid, _, _, state in _processes() if state != "Z"}
    return [pid for pid in pids if pid in alive]


def _wait_until_gone(pids: list[int]) -> list[int]:
    """Wait (at most WAIT_S) until none of `pids` lives; return those still alive."""
    deadline = time.monotonic() + WAIT_S
    while _living(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _living(pids)


def _recorded_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        if "runs" not in tables:
            return 0
        return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])


@pytest.mark.parametrize(
    ("sig", "whole_group"),
    [
        (signal.SIGTERM, False),
        (signal.SIGKILL, False),
        (signal.SIGINT, False),
        (signal.SIGTERM, True),
        (signal.SIGINT, True),
    ],
    ids=["kill-pid", "kill-9-pid", "sigint-pid", "timeout-group", "ctrl-c-group"],
)
def test_ending_perfgate_run_ends_its_servers_and_records_nothing(
    tmp_path: Path, sig: signal.Signals, whole_group: bool
) -> None:
    write_config(tmp_path)
    process, output = _start_run(tmp_path)
    started: list[int] = []
    try:
        _wait_for_line(process, output, SERVING_LINE)
        started = descendants(process.pid)
        assert started, "perfgate run shows a serving server, so it has processes below it"
        if whole_group:
            os.killpg(process.pid, sig)
        else:
            os.kill(process.pid, sig)
        code = process.wait(timeout=WAIT_S)
        left = _wait_until_gone([process.pid, *started])
    finally:
        for pid in _living(started):  # what a failed test would leave behind
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.read_text(errors="replace")
    assert code != 0, text
    assert left == [], f"still running after {WAIT_S:.0f} s: {left}\n{text}"
    assert _recorded_runs(tmp_path / "history.db") == 0, text
    assert not (tmp_path / "reports" / "index.html").exists(), text
    assert "perfgate exit code: 0" not in text


def test_ctrl_c_keeps_the_previous_sessions_pointer_and_says_it_recorded_nothing(
    tmp_path: Path,
) -> None:
    write_config(tmp_path)
    first = run_perfgate("run", "--no-gate", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    pointer = tmp_path / ".perfgate" / "last-session.json"
    before = pointer.read_text()
    process, output = _start_run(tmp_path)
    try:
        _wait_for_line(process, output, SERVING_LINE)
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.read_text(errors="replace")
    assert code == 2, text  # pytest's "interrupted"
    assert "perfgate: interrupted: nothing was recorded" in text
    assert "perfgate exit code: 2" in text and "perfgate exit code: 0" not in text
    assert pointer.read_text() == before
    assert _recorded_runs(tmp_path / "history.db") == 1
    summary = run_perfgate("ci", "summary", cwd=tmp_path)
    assert summary.returncode == 0 and "#1" in summary.stdout, summary.stdout + summary.stderr
