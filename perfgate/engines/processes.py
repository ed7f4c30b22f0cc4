"""Processes as /proc shows them: signalled only while they are still who they were, and
waited for until they have exited.

A process is named by its pid *and* its start time (field 22 of ``/proc/PID/stat``): a pid
the kernel gave to another process in the meantime has another start time. Before every
signal the process is read again; on Linux a pidfd holds on to it between that check and the
signal, so not even a pid recycled in between is hit.

A process has exited once none of its threads runs: a thread-group leader shows as a zombie
while its other threads still tear down (and hold its memory, its sockets, its GPU context),
so its state alone does not say. Waiting polls pidfds, which the kernel makes readable when
the whole process has exited; without them (macOS, a kernel before 5.3) it reads /proc.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
POLL_S = 0.1  # between reads of /proc, where there are no pidfds
GONE = ("Z", "X")  # a zombie holds nothing but its exit status; X: being removed


@dataclass(frozen=True)
class ProcessInfo:
    """A process as /proc shows it; ``environ`` is None where it cannot be read."""

    pid: int
    ppid: int
    state: str
    cmdline: str
    environ: Mapping[str, str] | None
    started: int | None = None  # clock ticks after boot: with the pid, who the process is
    cwd: str | None = None  # None where it cannot be read
    pgrp: int | None = None  # its process group

    @property
    def alive(self) -> bool:
        return self.state not in GONE or _threads_running(self.pid)


def _threads_running(pid: int, proc: Path = PROC) -> bool:
    """Whether a process whose leader is a zombie still has a thread that runs."""
    for stat in (proc / str(pid) / "task").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if stat.read_text().rsplit(")", 1)[1].split()[0] not in GONE:
                return True
    return False


def read_process(pid: int, proc: Path = PROC) -> ProcessInfo | None:
    """One process, or None when it is gone."""
    base = proc / str(pid)
    try:
        fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
        state, ppid, pgrp, started = fields[0], fields[1], fields[2], int(fields[19])
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None
    try:
        cwd: str | None = os.readlink(base / "cwd")
    except OSError:
        cwd = None
    try:
        raw = (base / "environ").read_bytes()
        environ: dict[str, str] | None = dict(
            entry.decode(errors="replace").split("=", 1)
            for entry in raw.split(b"\0")
            if b"=" in entry
        )
    except OSError:  # another user's process
        environ = None
    return ProcessInfo(pid, int(ppid), state, cmdline.strip(), environ, started, cwd, int(pgrp))


def iter_processes(proc: Path = PROC) -> Iterator[ProcessInfo]:
    """Every process /proc lists, skipping those that end while it is read."""
    for entry in proc.glob("[0-9]*"):
        found = read_process(int(entry.name), proc)
        if found is not None:
            yield found


def carrying(
    name: str, value: str, processes: Sequence[ProcessInfo] | None = None
) -> list[ProcessInfo]:
    """The living processes whose environment sets `name` to `value`."""
    table = iter_processes() if processes is None else processes
    return [p for p in table if p.alive and p.environ is not None and p.environ.get(name) == value]


def in_group(pgrp: int, processes: Sequence[ProcessInfo] | None = None) -> list[ProcessInfo]:
    """The living processes of process group `pgrp`."""
    table = iter_processes() if processes is None else processes
    return [p for p in table if p.alive and p.pgrp == pgrp]


def still(process: ProcessInfo) -> bool:
    """Whether `process` is still alive and still itself (the same start time at its pid)."""
    now = read_process(process.pid)
    return now is not None and now.alive and now.started == process.started


def send(process: ProcessInfo, sig: signal.Signals) -> bool:
    """Signal `process` if its pid still names it; return whether the signal was sent."""
    try:
        handle = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd here (macOS, a kernel before 5.3)
        if not still(process):
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, sig)
            return True
        return False
    try:
        if still(process):  # read after the pidfd pinned whichever process has the pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(handle, sig)
                return True
        return False
    finally:
        os.close(handle)


def send_all(processes: Sequence[ProcessInfo], sig: signal.Signals) -> None:
    for process in processes:
        send(process, sig)


def wait_gone(processes: Sequence[ProcessInfo], timeout_s: float) -> list[ProcessInfo]:
    """Wait until every one of `processes` has exited, at most `timeout_s`; return those
    still running then."""
    deadline = time.monotonic() + timeout_s
    handles = _pidfds(processes)
    try:
        living = [p for p in processes if still(p)]
        while living and time.monotonic() < deadline:
            _sleep_on(handles, living, min(POLL_S, max(deadline - time.monotonic(), 0.0)))
            living = [p for p in living if still(p)]
        return living
    finally:
        for handle in handles.values():
            os.close(handle)


def _pidfds(processes: Sequence[ProcessInfo]) -> dict[int, int]:
    """A pidfd per process that still is itself (pinned before the check), where there are
    pidfds."""
    handles: dict[int, int] = {}
    for process in processes:
        try:
            handle = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            continue
        if still(process):
            handles[process.pid] = handle
        else:
            os.close(handle)
    return handles


def _sleep_on(handles: Mapping[int, int], living: Sequence[ProcessInfo], timeout_s: float) -> None:
    """Sleep until one of `living` exits (its pidfd turns readable) or `timeout_s` passes."""
    fds = [handles[p.pid] for p in living if p.pid in handles]
    if fds and len(fds) == len(living):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(timeout_s * 1e3)
    else:
        time.sleep(timeout_s)


def end_processes(
    processes: Sequence[ProcessInfo], grace_s: float = 10.0, kill_wait_s: float = 5.0
) -> list[ProcessInfo]:
    """SIGTERM, then SIGKILL what is left after `grace_s`; wait for them; return those that
    survived even that (a process stuck in the kernel, say).

    Before every signal each process is read again: one that ended, and whose pid now names
    another process, is neither signalled nor counted.
    """
    send_all(processes, signal.SIGTERM)
    living = wait_gone(processes, grace_s)
    send_all(living, signal.SIGKILL)
    return wait_gone(living, kill_wait_s)


def describe(process: ProcessInfo, width: int = 120) -> str:
    """``pid N (state S): COMMAND``, the command cut to `width` characters."""
    command = (
        process.cmdline if len(process.cmdline) <= width else process.cmdline[: width - 3] + "..."
    )
    return f"pid {process.pid} (state {process.state}): {command}"
