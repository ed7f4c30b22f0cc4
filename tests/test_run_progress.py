"""`perfgate run` shows its long waits: one line per step in a log, a live line on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from .conftest import HERE_PROFILE, write_config
from .hang import HANG_S
from .recorded import RecordedProject

pytestmark = pytest.mark.slow

READY = r"ready in [\d.]+ s"


def run_in_terminal(*args: str, cwd: Path, env: dict[str, str], timeout: float = HANG_S) -> str:
    """Run the `perfgate` CLI on a pseudo-terminal 100 columns wide; return all it showed."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    full_env = {**os.environ, **env}
    full_env.pop("PERFGATE_DB_URL", None)
    full_env.pop("PERFGATE_PROFILE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "perfgate", *args],
        cwd=cwd,
        env=full_env,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    shown, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([main], [], [], 1.0)[0]:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the terminal's other end closed: everything was read
                    break
                if not chunk:
                    break
                shown += chunk
        assert process.wait(timeout=max(deadline - time.monotonic(), 1)) == 0, shown.decode()
    finally:
        process.kill()
        os.close(main)
    return shown.decode("utf-8", errors="replace")


def test_a_log_gets_one_line_per_step_and_no_carriage_return(
    recorded_project: RecordedProject,
) -> None:
    # The first run of the session's recorded project: `perfgate run --no-gate` of the tiny
    # scenario with TERM=xterm, its output to pipes (tests/recorded.py).
    out, err = recorded_project.first_run, recorded_project.first_run_stderr
    assert "\r" not in out + err and "\x1b" not in out + err
    lines = out.splitlines()
    for mode in ("plain", "spec"):
        expected = [
            f"tiny: starting {mode} server",
            f"tiny: starting {mode} server: {READY}",
            rf"tiny {mode}: warmup 1 of 1, [\d.]+ s",
            rf"tiny {mode}: 1 warmup in [\d.]+ s",
            *(rf"tiny {mode}: repeat {n} of 3, [\d.]+ s" for n in (1, 2, 3)),
            rf"tiny {mode}: 3 repeats in [\d.]+ s",
        ]
        found = [i for i, line in enumerate(lines) if line.startswith(f"tiny: starting {mode}")]
        assert len(found) == 2, out  # one line at the start, one at the end
        shown = lines[found[0] : found[0] + len(expected)]
        assert all(re.fullmatch(e, line) for e, line in zip(expected, shown, strict=True)), out
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in out


def test_a_terminal_gets_a_live_line_and_no_colour_under_no_color(tmp_path: Path) -> None:
    write_config(tmp_path)
    shown = run_in_terminal(
        "run", "--no-gate", cwd=tmp_path, env={"TERM": "xterm", "NO_COLOR": "1"}
    )
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in shown
    assert "\x1b" not in shown, "NO_COLOR: no escape codes at all"
    for mode in ("plain", "spec"):
        # A live line, then erased (a carriage return, spaces, a carriage return)...
        live = rf"tiny: starting {mode} server: [\d.]+ s[^\r\n]*\r +\r"
        assert re.search(live, shown), shown
        # ...and the step's end kept on a line of its own.
        assert re.search(rf"\rtiny: starting {mode} server: {READY}\r?\n", shown), shown
        assert re.search(rf"\rtiny {mode}: 3 repeats in [\d.]+ s\r?\n", shown), shown
    assert not re.search(r"tiny: starting \w+ server\r?\n", shown), "no start line on a terminal"
