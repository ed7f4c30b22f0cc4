"""Ending `perfgate run` while it measures a --tp-size 2 server leaves no rank process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.engines.supervise import _processes, descendants

from ..conftest import TINY_SCENARIO, write_config

pytestmark = pytest.mark.slow

SERVING_LINE = "tiny plain: repeat 1 of"
RANK_MODULE = b"perfgate.engines.embedded.rank\0"  # /proc/PID/cmdline: NUL-separated
WAIT_S = 120.0


def _living(pids: list[int]) -> list[int]:
    alive = {pid for pid, _, _, state in _processes() if state != "Z"}
    return [pid for pid in pids if pid in alive]


def _is_rank(pid: int) -> bool:
    try:
        return RANK_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name
)
def test_ending_perfgate_run_ends_every_rank(tmp_path: Path, sig: signal.Signals) -> None:
    write_config(tmp_path, TINY_SCENARIO.replace('device = "cpu"', 'device = "cpu"\ntp = 2'))
    output = tmp_path / "output.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGATE_DB_URL", "CI")}
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "perfgate", "run"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while SERVING_LINE not in output.read_text(errors="replace"):
            assert process.poll() is None, f"perfgate run ended early:\n{output.read_text()}"
            assert time.monotonic() < deadline, f"no {SERVING_LINE!r} within {WAIT_S:.0f} s"
            time.sleep(0.05)
        started = descendants(process.pid)
        assert [pid for pid in started if _is_rank(pid)], "a TP2 server runs one rank process"
        os.kill(process.pid, sig)  # perfgate alone, as `kill` or a CI cancellation does
        process.wait(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while _living(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _living(started)
    finally:
        for pid in _living(started):  # what a failed test would leave behind
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert left == [], f"still running after {WAIT_S:.0f} s: {left}\n{output.read_text()}"
