"""Ending `perfgate run` while it measures a --tp-size 2 server leaves no rank process."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from perfgate.engines.supervise import descendants

from ..conftest import (
    RUN_WAIT_S,
    TINY_SCENARIO,
    living,
    start_perfgate_run,
    wait_for_line,
    wait_until_gone,
    write_config,
)

pytestmark = pytest.mark.slow

# The run's first server (the speculative one, measured before its plain twin) is enough:
# waiting for the twin would pay for a whole measurement and another TP2 launch first.
SERVING_LINE = "tiny spec: repeat 1 of"
# No warm-up: it is one more generation before the line, and nothing here reads a figure. The
# three repeats stay: they keep the server measuring while the test finds its ranks and signals.
SCENARIO = TINY_SCENARIO.replace("warmup = 1", "warmup = 0").replace(
    'device = "cpu"', 'device = "cpu"\ntp = 2'
)
assert "warmup = 0" in SCENARIO and "tp = 2" in SCENARIO
RANK_MODULE = b"perfgate.engines.embedded.rank\0"  # /proc/PID/cmdline: NUL-separated


def _is_rank(pid: int) -> bool:
    try:
        return RANK_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name
)
def test_ending_perfgate_run_ends_every_rank(tmp_path: Path, sig: signal.Signals) -> None:
    write_config(tmp_path, SCENARIO)
    process, output = start_perfgate_run(tmp_path)
    started: list[int] = []
    try:
        wait_for_line(process, output, SERVING_LINE)
        started = descendants(process.pid)
        assert [pid for pid in started if _is_rank(pid)], "a TP2 server runs one rank process"
        os.kill(process.pid, sig)  # perfgate alone, as `kill` or a CI cancellation does
        process.wait(timeout=RUN_WAIT_S)
        left = wait_until_gone(started)
    finally:
        for pid in living(started):  # what a failed test would leave behind
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert left == [], f"still running after {RUN_WAIT_S:.0f} s: {left}\n{output.read_text()}"
