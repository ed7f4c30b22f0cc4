"""A server's end, as the launcher and its supervisor see it: only what is still the server's
is signalled, and every process of the server has exited when its end returns.
"""

from __future__ import annotations

import signal
import sys
import time


def test_the_supervisor_signals_a_pid_only_while_it_names_the_process_it_found() -> None:
    import subprocess

    from perfgate.engines import supervise

    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        try:
            (row,) = [r for r in supervise._processes() if r[0] == sleeper.pid]
            # What the supervisor found under this pid ended, and the kernel gave the pid to
            # another process: its start time differs.
            supervise._send((*row[:4], row[4] - 1), signal.SIGKILL)
            time.sleep(0.2)
            assert sleeper.poll() is None, "a process that was not the one found was signalled"
            supervise._send(row, signal.SIGKILL)
            assert sleeper.wait(timeout=10) == -signal.SIGKILL
        finally:
            sleeper.kill()
