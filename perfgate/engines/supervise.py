"""Run a server under a small supervisor that never lets it outlive the process that launched it.

    python -m perfgate.engines.supervise --lifeline FD [--grace-s S] -- SERVER ARGV...

The launcher starts this in a new process group and keeps the write end of a pipe whose read
end is FD. However the launcher ends (return, exception, SIGINT, SIGTERM, even SIGKILL, which
runs no cleanup), the kernel closes that write end; the supervisor reads end-of-file and ends
the server's whole process group, plus any descendant that left it (on Linux the supervisor is
a child subreaper, so orphaned descendants stay its own). When the server exits by itself
(a crash), the supervisor ends what the server left behind too, and exits with the server's
code, so the launcher sees the server's code (64: it refused its arguments).

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


def _become_subreaper() -> None:
    # Orphaned descendants are re-parented to us instead of init: we can still find them.
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _processes() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state) of every process, from /proc; [] without it."""
    rows = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        rows.append((int(stat.parent.name), int(ppid), int(pgrp), state))
    return rows


def descendants(root: int, rows: Sequence[tuple[int, int, int, str]] | None = None) -> list[int]:
    """Every process below `root` (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in _processes() if rows is None else rows:
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def server_processes() -> list[int]:
    """The living processes of our group and below us, except us: what must not outlive us."""
    me, group = os.getpid(), os.getpgrp()
    rows = _processes()
    mine = {pid for pid, _, pgrp, _ in rows if pgrp == group} | set(descendants(me, rows))
    living = {pid for pid, _, _, state in rows if state != "Z"}
    return sorted((mine & living) - {me})


def _signal_all(sig: signal.Signals) -> None:
    if not Path("/proc").is_dir():
        if sig != signal.SIGKILL:  # our handlers keep us alive through SIGTERM/SIGINT
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgrp(), sig)
        return
    for pid in server_processes():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Supervisor:
    def __init__(self, argv: Sequence[str], grace_s: float) -> None:
        self.grace_s = grace_s
        self.server = subprocess.Popen(list(argv))  # same group, inherits stdout/stderr
        self._ending = threading.Lock()

    def end_everything(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Ask every process of the server to stop, wait `grace_s`, then kill what is left."""
        _signal_all(sig)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            self._reap()
            if self.server.poll() is not None and not server_processes():
                break
            time.sleep(0.05)
        _signal_all(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.server.wait(timeout=self.grace_s)
        self._reap()

    def _reap(self) -> None:
        # Orphans re-parented to us become our zombies once they die: collect them, but never
        # the server itself, whose exit code Popen.wait must see.
        me = os.getpid()
        for pid, ppid, _, state in _processes():
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
            self.end_everything()  # what the server left behind
        return code if code >= 0 else 128 - code


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
