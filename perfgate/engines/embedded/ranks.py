"""The rank processes of a ``--tp-size N`` server: started by it, watched, and never
outliving it.

The server (rank 0) starts ranks 1..N-1 as ``python -m perfgate.engines.embedded.rank`` with
its own flags, in its process group, so perfgate's launcher stops them with it. A rank
also dies with the server however the server ends: on Linux the kernel sends it SIGKILL when
the server's main thread exits (``PR_SET_PDEATHSIG``), and a watchdog thread ends it when its
stdin, a pipe from the server, reaches end-of-file (the server is gone, on any system).
SIGTERM and SIGINT end a rank at once: it holds nothing to save.

The server watches its ranks for its whole life. A rank that exits (a crash, SIGKILL, the
out-of-memory killer) leaves the others waiting at their next collective, which on NCCL
waits for ever; so once one has exited, the server prints which rank, how it ended and its
last lines, kills the other ranks, waits for them and exits with code 69 (infrastructure),
within a second, whether it was starting, serving a request or idle. Each rank's output
goes through the server, every line marked ``[rank R]``, into the server's own log.

The probe's import hook reaches these processes like any other the server starts; each
writes its own records, marked with its rank in the process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from perfgate.errors import ExitCode

logger = logging.getLogger("perfgate.engines.embedded")

NVLS_VARIABLE = "NCCL_NVLS_ENABLE"
RANK_MODULE = "perfgate.engines.embedded.rank"  # a rank process's entry point
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_TIMEOUT_S = 5.0
WATCH_INTERVAL_S = 0.1
TAIL_LINES = 12  # a rank's last lines quoted when it fails
OUTPUT_WAIT_S = 1.0  # for a failed rank's last lines to arrive through its pipe
FAILURE_WAIT_S = 2.0  # a job that failed on rank 0: how long to look for a rank's exit
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # what the launcher stops the group with
STOP_SIGNAL_WAIT_S = 1.0  # for the server's own handler of such a signal to say it stops
# Ranks that end within this of the first one ended together: a rank killed by a signal makes
# its peers' collectives fail ("Connection reset by peer"), and the machine's load can order
# their exits either way. Among them, the one a signal ended is the cause.
TOGETHER_S = 0.5


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


def exit_status(code: int) -> str:
    """How a process ended, from its Popen return code: ``exited with code 3``, ``was killed
    by SIGKILL (signal 9)``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by {name} (signal {-code})"


class Rank:
    """One rank process: its output relayed into the server's stderr as it comes (the last
    lines kept), and its exit waited for."""

    def __init__(self, rank: int, process: subprocess.Popen[bytes], on_exit: Callable[[], None]):
        self.rank = rank
        self.process = process
        self.pidfd = _pidfd(process.pid)  # opened before it can be reaped: this very process
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.ended: tuple[float, int] | None = None  # when (monotonic) and its return code
        self._on_exit = on_exit
        self.relay = threading.Thread(
            target=self._relay, name=f"perfgate-rank-{rank}-output", daemon=True
        )

    def watch(self) -> None:
        """Start relaying its output and waiting for its exit."""
        self.relay.start()
        threading.Thread(
            target=self._wait, name=f"perfgate-rank-{self.rank}-exit", daemon=True
        ).start()

    def _relay(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.tail.append(line)
            with contextlib.suppress(OSError, ValueError):  # our stderr closed: keep the tail
                sys.stderr.write(f"[rank {self.rank}] {line}\n")
                sys.stderr.flush()

    def _wait(self) -> None:
        code = self.process.wait()
        self.ended = (time.monotonic(), code)
        self._on_exit()

    def kill(self) -> None:
        """SIGKILL this rank if it still runs. Through its pidfd where there is one, which
        names this process only, never another that got its pid after it was reaped."""
        if self.pidfd is None:
            self.process.kill()  # Popen signals only a child it has not reaped
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)


def first_to_end(ranks: Sequence[Rank]) -> Rank | None:
    """The rank whose end the others followed: of those that ended within `TOGETHER_S` of the
    first, the first that a signal ended, else the first; None while every rank runs."""
    ended = sorted((rank for rank in ranks if rank.ended is not None), key=_end_time)
    if not ended:
        return None
    together = [rank for rank in ended if _end_time(rank) - _end_time(ended[0]) <= TOGETHER_S]
    killed = [rank for rank in together if rank.ended is not None and rank.ended[1] < 0]
    return (killed or ended)[0]


def _end_time(rank: Rank) -> float:
    return rank.ended[0] if rank.ended is not None else math.inf


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfds here (macOS, a kernel before 5.3)
        return None


def server_stopping() -> None:
    """Tell this server's ranks that it is stopping (its SIGTERM or SIGINT handler): the ranks
    that the same signal ends are not a failure."""
    for ranks in _ALL:
        ranks.stopping.set()


class RankProcesses:
    """Ranks 1..N-1 of this server: started together, watched together, stopped together.

    From the start, the first rank to exit while the server is not stopping ends this
    process with exit code 69 (`fail`), whether the server was starting, decoding or idle.
    """

    def __init__(self, argv: Sequence[str], world: int, port: int) -> None:
        # NCCL's multicast reductions stay off unless the scenario's environment says otherwise.
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # a rank's lines come as it writes them
        env.setdefault(NVLS_VARIABLE, "0")
        self.world = world
        self.started = threading.Event()  # set once the server serves
        self.stopping = threading.Event()
        self._failing = threading.Lock()
        self.ranks: list[Rank] = []
        _ALL.append(self)
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
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
            )
            self.ranks.append(Rank(rank, process, self._rank_exited))
        for each in self.ranks:  # once all are listed: the first to exit is always seen
            each.watch()

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [rank.process for rank in self.ranks]

    def _rank_exited(self) -> None:
        first = self._first_ended()
        if first is None or self.stopping.is_set():
            return
        code = first.ended[1] if first.ended is not None else 0
        # The server's own stop signals its whole group: wait for its handler to say so. A
        # rank that refused at start (bad weights, say) may have done so with rank 0, whose
        # own refusal (exit 64) is then the one to report.
        expected = -code in STOP_SIGNALS or (
            code == ExitCode.BAD_INPUT and not self.started.is_set()
        )
        if expected and self.stopping.wait(STOP_SIGNAL_WAIT_S):
            return
        self.fail()

    def _first_ended(self) -> Rank | None:
        return first_to_end(self.ranks)

    def after_failed_job(self) -> None:
        """A job failed on rank 0 (a collective broke, say): if a rank exited, which is the
        usual cause, end this process (`fail`) rather than answer the request; return when
        every rank still runs `FAILURE_WAIT_S` later."""
        deadline = time.monotonic() + FAILURE_WAIT_S
        while time.monotonic() < deadline:
            if self._first_ended() is not None and not self.stopping.is_set():
                self.fail()
            time.sleep(WATCH_INTERVAL_S)

    def fail(self) -> None:
        """Say which rank ended first, how, and its last lines; kill the other ranks and wait
        for them; exit with code 69. Returns only while the server is stopping."""
        with self._failing:  # one report; a second caller waits here for the exit
            time.sleep(TOGETHER_S)  # a rank that ended with the first is seen too
            rank = self._first_ended()
            if rank is None or rank.ended is None or self.stopping.is_set():
                return
            rank.relay.join(OUTPUT_WAIT_S)  # its last words, up to its end
            when = "after start-up" if self.started.is_set() else "while the server was starting"
            lines = [
                f"error: rank {rank.rank} of {self.world} (pid {rank.process.pid}) "
                f"{exit_status(rank.ended[1])} {when}, so the server ends (exit code "
                f"{int(ExitCode.INFRASTRUCTURE)})",
                f"rank {rank.rank}'s last lines:",
                *(f"  [rank {rank.rank}] {line}" for line in rank.tail or ["(none)"]),
            ]
            print("\n".join(lines), file=sys.stderr, flush=True)
            self._kill_all()
            os._exit(ExitCode.INFRASTRUCTURE)

    def _kill_all(self) -> None:
        """SIGKILL every rank that still runs and wait for each (`STOP_TIMEOUT_S` at most)."""
        for rank in self.ranks:
            rank.kill()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Close every rank's pipe, then kill those still there after `STOP_TIMEOUT_S`;
        return once every rank has exited."""
        self.stopping.set()
        for process in self.processes:
            if process.stdin is not None:
                with contextlib.suppress(OSError):
                    process.stdin.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for rank in self.ranks:
            try:
                rank.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rank.kill()
                rank.process.wait()


_ALL: list[RankProcesses] = []
