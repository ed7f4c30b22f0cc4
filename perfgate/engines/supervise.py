"""Run a server under a small supervisor that never lets it outlive the process that launched it.

    python -m perfgate.engines.supervise --lifeline FD [--grace-s S] -- SERVER ARGV...

The launcher starts this in a new process group and keeps the write end of a pipe whose read
end is FD. However the launcher ends (return, exception, SIGINT, SIGTERM, even SIGKILL, which
runs no cleanup), the kernel closes that write end; the supervisor reads end-of-file and ends
the server's whole process group, plus any descendant that left it (on Linux the supervisor is
a child subreaper, so orphaned descendants stay its own). When the server exits by itself
(a crash), the supervisor ends what the server left behind too (SIGTERM, SIGKILL after
`CRASH_GRACE_S`), and exits with the server's code, so the launcher sees the server's code
(64: it refused its arguments); a server killed by a signal gets a line in its log saying
which. Either way the supervisor exits only once every process it ended has exited (its
own children reaped), so what it held (ports, GPU memory) is free when the launcher sees it
gone. It signals a process only while its pid still names the process it found (the same
start time), a pidfd holding on to it in between.

SIGTERM and SIGINT reach the supervisor with the rest of the group when the launcher stops
the server; it outlives them long enough to clean up. The server's own command line is not
changed, so `perfgate servers --dry-run` prints exactly what runs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
DEFAULT_GRACE_S = 10.0
CRASH_GRACE_S = 2.0  # for what a server that ended by itself left behind


def _become_subreaper() -> None:
    # Orphaned descendants are re-parented to us instead of init: we can still find them.
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


Row = tuple[int, int, int, str, int]  # pid, parent pid, process group, state, start time


def _processes() -> list[Row]:
    """(pid, parent pid, process group, state, start time) of every process, from /proc; []
    without it."""
    rows = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        row = _row(stat)
        if row is not None:
            rows.append(row)
    return rows


def _row(stat: Path) -> Row | None:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(stat.parent.name), int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int, rows: Sequence[Row] | None = None) -> list[int]:
    """Every process below `root` (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for pid, ppid, *_ in _processes() if rows is None else rows:
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _running(pid: int, state: str) -> bool:
    """Whether a process still runs: a zombie leader counts while another of its threads
    tears down (it still holds the process's memory, sockets and devices)."""
    if state not in ("Z", "X"):
        return True
    for stat in Path(f"/proc/{pid}/task").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return True
    return False


def server_rows() -> list[Row]:
    """The running processes of our group and below us, except us: what must not outlive us."""
    me, group = os.getpid(), os.getpgrp()
    rows = _processes()
    below = set(descendants(me, rows))
    return sorted(
        row
        for row in rows
        if (row[2] == group or row[0] in below) and row[0] != me and _running(row[0], row[3])
    )


def server_processes() -> list[int]:
    """The pids of `server_rows`."""
    return [row[0] for row in server_rows()]


def _send(row: Row, sig: signal.Signals) -> None:
    """Signal the process of `row` only while its pid still names it (the same start time),
    a pidfd holding on to it between the check and the signal where there are pidfds."""
    pid, started = row[0], row[4]
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here
        now = _row(Path(f"/proc/{pid}/stat"))
        if now is not None and now[4] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return
    try:
        now = _row(Path(f"/proc/{pid}/stat"))
        if now is not None and now[4] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(handle, sig)
    finally:
        os.close(handle)


def _signal_all(sig: signal.Signals) -> None:
    if not Path("/proc").is_dir():
        if sig != signal.SIGKILL:  # our handlers keep us alive through SIGTERM/SIGINT
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgrp(), sig)  # our own group: we lead it, so it is ours
        return
    for row in server_rows():
        _send(row, sig)


class Supervisor:
    def __init__(self, argv: Sequence[str], grace_s: float) -> None:
        self.grace_s = grace_s
        self.server = subprocess.Popen(list(argv))  # same group, inherits stdout/stderr
        self._ending = threading.Lock()

    def end_everything(self, grace_s: float | None = None) -> None:
        """Ask every process of the server to stop, wait `grace_s` (default: the supervisor's),
        then kill what is left and wait (the supervisor's grace at most) until every one has
        exited: reaped, where it is ours."""
        _signal_all(signal.SIGTERM)
        if not self._wait_all_gone(self.grace_s if grace_s is None else grace_s):
            _signal_all(signal.SIGKILL)
            self._wait_all_gone(self.grace_s)

    def _wait_all_gone(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            self._reap()
            if self.server.poll() is not None and not server_processes():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _reap(self) -> None:
        # Orphans re-parented to us become our zombies once they die: collect them, but never
        # the server itself, whose exit code Popen.wait must see.
        me = os.getpid()
        for pid, ppid, _, state, _ in _processes():
            if ppid == me and state == "Z" and pid != self.server.pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def watch_lifeline(self, fd: int) -> None:
        """Block until the launcher's end of the pipe closes; then end everything and exit."""
        with contextlib.suppress(OSError):
            while os.read(fd, 4096):
                pass
        with self._ending:
            print(
                "perfgate supervisor: the launcher stopped or is gone; ending the server",
                flush=True,
            )
            self.end_everything()
            os._exit(1)

    def run(self) -> int:
        code = self.server.wait()
        with self._ending:
            if code < 0:  # the launcher reads this line to say how the server ended
                print(
                    f"perfgate supervisor: the server (pid {self.server.pid}) was killed by "
                    f"{_signal_name(-code)}",
                    flush=True,
                )
            # What the server left behind: with the server gone it has nothing to finish, and
            # the launcher is waiting to report the crash.
            self.end_everything(min(self.grace_s, CRASH_GRACE_S))
        return code if code >= 0 else 128 - code


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perfgate.engines.supervise")
    parser.add_argument("--lifeline", type=int, required=True, metavar="FD")
    parser.add_argument("--grace-s", type=float, default=DEFAULT_GRACE_S)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the server's command after --")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        # A Python handler (not SIG_IGN, which exec would pass on to the server).
        signal.signal(sig, lambda *_: None)
    _become_subreaper()
    try:
        supervisor = Supervisor(args.command, args.grace_s)
    except OSError as error:
        print(f"cannot start {args.command[0]}: {error.strerror}", file=sys.stderr, flush=True)
        return 127
    threading.Thread(target=supervisor.watch_lifeline, args=(args.lifeline,), daemon=True).start()
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
