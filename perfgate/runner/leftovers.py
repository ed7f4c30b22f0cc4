"""Find and end the inference servers earlier or cancelled jobs left on a runner.

The runner's own cleanup ends the processes that still carry its job's ``RUNNER_TRACKING_ID``;
a server that outlived its job (a cancelled run, a step that started one with ``&``) or that
holds a GPU through a detached process escapes it. A process counts as a leftover server when

- perfgate launched it (``PERFGATE_SERVER`` in its environment, set by the launcher and
  inherited by every process a server spawns), or
- its command line is perfgate's supervisor or embedded server, or an SGLang entry point
  (``sglang.launch_server``, ``sglang.srt``, ``sglang.bench``, or an ``sglang::`` process title),
  or it holds a CUDA context on one of the GPUs (``gpu_pids``),

and it belongs to this runner: its ``RUNNER_NAME`` is the hook's, so several runners on one
host never end each other's servers (the hooks end nothing where ``RUNNER_NAME`` is unset).
Processes whose environment cannot be read (another user's) are never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.engines.launch import SERVER_MARKER

SERVER_COMMANDS = re.compile(
    r"perfgate/engines/supervise\.py|perfgate\.engines\.embedded\.server"
    r"|sglang\.launch_server|sglang\.srt\b|sglang\.bench|(?:^|\s)sglang::"
)
OWNER_VARIABLE = "RUNNER_NAME"
DEFAULT_GRACE_S = 10.0


@dataclass(frozen=True)
class ProcessInfo:
    """A process as /proc shows it; ``environ`` is None where it cannot be read."""

    pid: int
    ppid: int
    state: str
    cmdline: str
    environ: Mapping[str, str] | None

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def read_process(pid: int, proc: Path = Path("/proc")) -> ProcessInfo | None:
    """One process, or None when it is gone."""
    base = proc / str(pid)
    try:
        state, ppid = (base / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None
    try:
        raw = (base / "environ").read_bytes()
        environ: dict[str, str] | None = dict(
            entry.decode(errors="replace").split("=", 1)
            for entry in raw.split(b"\0")
            if b"=" in entry
        )
    except OSError:  # another user's process
        environ = None
    return ProcessInfo(pid, int(ppid), state, cmdline.strip(), environ)


def iter_processes(proc: Path = Path("/proc")) -> Iterator[ProcessInfo]:
    """Every process /proc lists, skipping those that end while it is read."""
    for entry in proc.glob("[0-9]*"):
        found = read_process(int(entry.name), proc)
        if found is not None:
            yield found


def ancestors(pid: int, table: Mapping[int, ProcessInfo]) -> set[int]:
    """`pid` and every process above it."""
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid].ppid
    return seen | {pid}


def server_reason(process: ProcessInfo, gpu_pids: Collection[int]) -> str | None:
    """Why `process` looks like an inference server; None when it does not."""
    if process.environ is not None and SERVER_MARKER in process.environ:
        return f"launched by perfgate ({process.environ[SERVER_MARKER]})"
    if SERVER_COMMANDS.search(process.cmdline):
        return "an inference server's command line"
    if process.pid in gpu_pids:
        return "holds a GPU"
    return None


@dataclass(frozen=True)
class Leftover:
    process: ProcessInfo
    reason: str

    def describe(self) -> str:
        command = (
            self.process.cmdline
            if len(self.process.cmdline) <= 120
            else self.process.cmdline[:117] + "..."
        )
        return f"pid {self.process.pid} ({self.reason}): {command}"


def find_leftovers(
    owner: str,
    gpu_pids: Collection[int] = (),
    processes: Sequence[ProcessInfo] | None = None,
    me: int | None = None,
) -> list[Leftover]:
    """The server processes of this runner (`owner`: its RUNNER_NAME), never us or above us."""
    table = {p.pid: p for p in (iter_processes() if processes is None else processes)}
    spared = ancestors(os.getpid() if me is None else me, table)
    found = []
    for process in table.values():
        if process.pid in spared or not process.alive or process.environ is None:
            continue
        if process.environ.get(OWNER_VARIABLE) != owner:
            continue
        reason = server_reason(process, gpu_pids)
        if reason is not None:
            found.append(Leftover(process, reason))
    return sorted(found, key=lambda leftover: leftover.process.pid)


def _alive(pid: int) -> bool:
    found = read_process(pid)
    return found is not None and found.alive


def _signal(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    living = [pid for pid in pids if _alive(pid)]
    while living and time.monotonic() < deadline:
        time.sleep(0.1)
        living = [pid for pid in living if _alive(pid)]
    return living


def end_processes(pids: Sequence[int], grace_s: float = DEFAULT_GRACE_S) -> list[int]:
    """SIGTERM, then SIGKILL what is left after `grace_s`; return the pids that survived."""
    _signal(pids, signal.SIGTERM)
    living = _wait_gone(pids, grace_s)
    _signal(living, signal.SIGKILL)
    return _wait_gone(living, 5.0)
