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
A process whose ``RUNNER_NAME`` was cleared (``env -u``, ``env -i``) is this runner's when the
job's folders it names (``RUNNER_TEMP``, ``RUNNER_WORKSPACE``, ``GITHUB_WORKSPACE``), or else
its working directory, lie in this runner's work folder (the parent of the hook's
``RUNNER_TEMP``, ``_work/_temp``). Processes whose environment cannot be read (another
user's) are never touched.

A pid is signalled only while it is still the process that was found: its start time (field
22 of ``/proc/PID/stat``) is read again before every signal, so a pid the kernel gave to
another process in the meantime is left alone.
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
# The job's folders a runner sets for every step (and hook), all inside its work folder.
FOLDER_VARIABLES = ("RUNNER_TEMP", "RUNNER_WORKSPACE", "GITHUB_WORKSPACE")
TEMP_NAME = "_temp"  # the runner's RUNNER_TEMP is <work folder>/_temp
DEFAULT_GRACE_S = 10.0


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

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def read_process(pid: int, proc: Path = Path("/proc")) -> ProcessInfo | None:
    """One process, or None when it is gone."""
    base = proc / str(pid)
    try:
        fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
        state, ppid, started = fields[0], fields[1], int(fields[19])  # fields 3, 4 and 22
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
    return ProcessInfo(pid, int(ppid), state, cmdline.strip(), environ, started, cwd)


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


def work_folder(environ: Mapping[str, str]) -> Path | None:
    """This runner's work folder, from the hook's RUNNER_TEMP (`<work>/_temp`); None when
    that is not a runner's layout (run by hand)."""
    temp = environ.get("RUNNER_TEMP")
    if not temp or Path(temp).name != TEMP_NAME:
        return None
    return Path(temp).resolve().parent


def belongs_to(process: ProcessInfo, owner: str, work: Path | None) -> bool:
    """Whether `process` is this runner's: its RUNNER_NAME is `owner`, or, with its
    RUNNER_NAME cleared, the job folders it names (else its working directory) are in `work`."""
    environ = process.environ or {}
    name = environ.get(OWNER_VARIABLE)
    if name:
        return name == owner
    if work is None:
        return False
    folders = [environ[v] for v in FOLDER_VARIABLES if environ.get(v)]
    places = folders or ([process.cwd] if process.cwd else [])
    return bool(places) and all(Path(place).resolve().is_relative_to(work) for place in places)


def find_leftovers(
    owner: str,
    gpu_pids: Collection[int] = (),
    processes: Sequence[ProcessInfo] | None = None,
    me: int | None = None,
    work: Path | None = None,
) -> list[Leftover]:
    """The server processes of this runner (`owner`: its RUNNER_NAME; `work`: its work
    folder, see `belongs_to`), never us or above us."""
    table = {p.pid: p for p in (iter_processes() if processes is None else processes)}
    spared = ancestors(os.getpid() if me is None else me, table)
    found = []
    for process in table.values():
        if process.pid in spared or not process.alive or process.environ is None:
            continue
        if not belongs_to(process, owner, work):
            continue
        reason = server_reason(process, gpu_pids)
        if reason is not None:
            found.append(Leftover(process, reason))
    return sorted(found, key=lambda leftover: leftover.process.pid)


def still(process: ProcessInfo) -> bool:
    """Whether `process` is still alive and still itself (the same start time at its pid)."""
    now = read_process(process.pid)
    return now is not None and now.alive and now.started == process.started


def _signal(processes: Sequence[ProcessInfo], sig: signal.Signals) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            _send(process, sig)


def _send(process: ProcessInfo, sig: signal.Signals) -> None:
    """Signal `process` if its pid still names it. On Linux a pidfd holds on to the process
    between the check and the signal, so not even a pid recycled in between is hit."""
    try:
        handle = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here (macOS, a kernel before 5.3)
        if still(process):
            os.kill(process.pid, sig)
        return
    try:
        if still(process):  # read after the pidfd pinned whichever process has the pid
            signal.pidfd_send_signal(handle, sig)
    finally:
        os.close(handle)


def _wait_gone(processes: Sequence[ProcessInfo], timeout_s: float) -> list[ProcessInfo]:
    deadline = time.monotonic() + timeout_s
    living = [p for p in processes if still(p)]
    while living and time.monotonic() < deadline:
        time.sleep(0.1)
        living = [p for p in living if still(p)]
    return living


def end_processes(
    processes: Sequence[ProcessInfo], grace_s: float = DEFAULT_GRACE_S
) -> list[ProcessInfo]:
    """SIGTERM, then SIGKILL what is left after `grace_s`; return those that survived.

    Before every signal each process is read again: one that ended, and whose pid now names
    another process, is neither signalled nor counted.
    """
    _signal(processes, signal.SIGTERM)
    living = _wait_gone(processes, grace_s)
    _signal(living, signal.SIGKILL)
    return _wait_gone(living, 5.0)
