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
from pathlib import Path

import pytest

from perfgate.engines.supervise import descendants

from .conftest import (
    RUN_WAIT_S,
    living,
    start_perfgate_run,
    wait_for_line,
    wait_until_gone,
    write_config,
)
from .in_process import perfgate_main
from .recorded import RecordedProject
from .short_scenario import SHORT_SCENARIO

pytestmark = pytest.mark.slow

# The first server a run measures (the speculative one: perfgate.pipeline.MEASURE_ORDER) timing
# its first repeat: the run has a server up under its supervisor and a measurement not yet
# recorded. Waiting for the plain twin instead would measure the whole speculative server and
# start a second one first, for the same check.
SERVING_LINE = "tiny spec: repeat 1 of"


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
    write_config(tmp_path, SHORT_SCENARIO)  # no warm-up before the first repeat
    process, output = start_perfgate_run(tmp_path)
    started: list[int] = []
    try:
        wait_for_line(process, output, SERVING_LINE)
        started = descendants(process.pid)
        assert started, "perfgate run shows a serving server, so it has processes below it"
        if whole_group:
            os.killpg(process.pid, sig)
        else:
            os.kill(process.pid, sig)
        code = process.wait(timeout=RUN_WAIT_S)
        left = wait_until_gone([process.pid, *started])
    finally:
        for pid in living(started):  # what a failed test would leave behind
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.read_text(errors="replace")
    assert code != 0, text
    assert left == [], f"still running after {RUN_WAIT_S:.0f} s: {left}\n{text}"
    assert _recorded_runs(tmp_path / "history.db") == 0, text
    assert not (tmp_path / "reports" / "index.html").exists(), text
    assert "perfgate exit code: 0" not in text


def test_ctrl_c_keeps_the_previous_sessions_pointer_and_says_it_recorded_nothing(
    recorded_project: RecordedProject, tmp_path: Path
) -> None:
    recorded_project.copy_to(tmp_path)  # an earlier session recorded run 3 (3 runs in all)
    pointer = tmp_path / ".perfgate" / "last-session.json"
    before = pointer.read_text()
    process, output = start_perfgate_run(tmp_path)
    try:
        wait_for_line(process, output, SERVING_LINE)
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=RUN_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.read_text(errors="replace")
    assert code == 2, text  # pytest's "interrupted"
    assert "perfgate: interrupted: nothing was recorded" in text
    assert "perfgate exit code: 2" in text and "perfgate exit code: 0" not in text
    assert pointer.read_text() == before
    assert _recorded_runs(tmp_path / "history.db") == 3
    summary = perfgate_main("ci", "summary", cwd=tmp_path)
    assert summary.returncode == 0 and "#3" in summary.stdout, summary.stdout + summary.stderr
