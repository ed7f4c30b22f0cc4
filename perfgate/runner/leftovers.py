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
another process in the meantime is left alone (perfgate.engines.processes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.engines.launch import SERVER_MARKER
from perfgate.engines.processes import ProcessInfo, iter_processes

SERVER_COMMANDS = re.compile(
    r"perfgate/engines/supervise\.py|perfgate\.engines\.embedded\.server"
    r"|sglang\.launch_server|sglang\.srt\b|sglang\.bench|(?:^|\s)sglang::"
)
OWNER_VARIABLE = "RUNNER_NAME"
# The job's folders a runner sets for every step (and hook), all inside its work folder.
FOLDER_VARIABLES = ("RUNNER_TEMP", "RUNNER_WORKSPACE", "GITHUB_WORKSPACE")
TEMP_NAME = "_temp"  # the runner's RUNNER_TEMP is <work folder>/_temp


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


def runner_temp(environ: Mapping[str, str]) -> Path | None:
    """The job's temporary folder, GitHub's runner's RUNNER_TEMP; None outside a job."""
    temp = environ.get("RUNNER_TEMP")
    return Path(temp) if temp else None


def work_folder(environ: Mapping[str, str]) -> Path | None:
    """This runner's work folder, from the hook's RUNNER_TEMP (`<work>/_temp`); None when
    that is not a runner's layout (run by hand)."""
    temp = runner_temp(environ)
    if temp is None or temp.name != TEMP_NAME:
        return None
    return temp.resolve().parent


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
