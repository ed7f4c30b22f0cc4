"""The rank processes of a ``--tp-size N`` server: started by it, and never outliving it.

The server (rank 0) starts ranks 1..N-1 as ``python -m perfgate.engines.embedded.rank`` with
its own flags, in its process group, so perfgate's launcher stops them with it. A rank
also dies with the server however the server ends: on Linux the kernel sends it SIGKILL when
the server's main thread exits (``PR_SET_PDEATHSIG``), and a watchdog thread ends it when its
stdin, a pipe from the server, reaches end-of-file (the server is gone, on any system).
SIGTERM and SIGINT end a rank at once: it holds nothing to save.

The probe's import hook reaches these processes like any other the server starts; each
writes its own records, marked with its rank in the process group.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from perfgate.errors import ExitCode

logger = logging.getLogger("perfgate.engines.embedded")

NVLS_VARIABLE = "NCCL_NVLS_ENABLE"
RANK_MODULE = "perfgate.engines.embedded.rank"  # a rank process's entry point
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_TIMEOUT_S = 5.0
WATCH_INTERVAL_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Make the kernel kill this process when its parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            logger.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)
    threading.Thread(target=_watch_stdin, name="perfgate-rank-watchdog", daemon=True).start()


def _watch_stdin() -> None:
    """End the process once the server's end of the stdin pipe is closed."""
    while os.read(0, 4096):  # unbuffered: no lock left held at the interpreter's end
        pass
    os._exit(1)


class RankProcesses:
    """Ranks 1..N-1 of this server: started together, stopped together."""

    def __init__(self, argv: Sequence[str], world: int, port: int) -> None:
        # NCCL's multicast reductions stay off unless the scenario's environment says otherwise.
        env = {**os.environ}
        env.setdefault(NVLS_VARIABLE, "0")
        self.processes: list[subprocess.Popen[bytes]] = []
        for rank in range(1, world):
            command = [
                sys.executable,
                *(["-P"] if getattr(sys.flags, "safe_path", False) else []),  # as the server
                "-m",
                RANK_MODULE,
                str(rank),
                str(world),
                str(port),
                str(os.getpid()),
                *argv,
            ]
            self.processes.append(subprocess.Popen(command, stdin=subprocess.PIPE, env=env))

    def watch_start(self) -> threading.Event:
        """Watch the ranks until the returned event is set: if one exits before, say so and
        end this process with exit code 69, instead of waiting for it at the first collective.
        """
        started = threading.Event()
        threading.Thread(
            target=self._watch, args=(started,), name="perfgate-rank-start", daemon=True
        ).start()
        return started

    def _watch(self, started: threading.Event) -> None:
        while not started.wait(WATCH_INTERVAL_S):
            for rank, process in enumerate(self.processes, start=1):
                code = process.poll()
                if code is not None and not started.is_set():
                    print(
                        f"error: rank {rank} (pid {process.pid}) exited with code {code} while "
                        "the server was starting; its lines above say why",
                        file=sys.stderr,
                        flush=True,
                    )
                    self.stop()
                    os._exit(ExitCode.INFRASTRUCTURE)

    def stop(self) -> None:
        """Close every rank's pipe, then kill those that are still there after a moment."""
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
