"""Where the test suite's CPU goes, process by process: the census behind issue 34's 5 minutes.

    python benchmarks/suite_processes.py [--out FILE.md] [--top N] -- PYTEST_ARGS...

Runs ``python -m pytest PYTEST_ARGS`` with a ``sitecustomize`` module first on PYTHONPATH that,
as each Python process of the run exits, appends its own CPU time (user and system) and its
command line to a log. Then it tables the CPU by kind of process (an embedded engine's server,
an xdist worker, a `perfgate` command, a benchmark script, ...). What each test costs, its
children included, is ``--cpu-costs N``'s table (tests/cpu_costs.py): pass it through.

What it cannot see, said in the table: a process that ends without running its exit handlers
(a SIGKILL, ``os._exit`` before them) and one started with an environment that drops
PYTHONPATH; and the module takes the place of any ``sitecustomize`` the interpreter had.
The run's whole CPU (every process the pytest process waited for, from
``getrusage``) is given beside the logged sum, so the part not seen is known.

``--accounting`` sees every process: it turns on the kernel's process accounting for the run
(``accton``, from Debian's ``acct``; root only), which records each process's CPU as it ends
however it ends, and tables every process below the pytest process, named from the command
line each Python process logged as it started. A Python process that logged nothing (its
test gave it an environment without PYTHONPATH, or a fork) is counted under the kind of its
nearest ancestor that did; any other program under its own name. It turns accounting off
after the run (``accton off``): not for a machine that keeps accounting on for itself.

Exit code: pytest's; 69 where ``--accounting`` cannot turn process accounting on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "SUITE_PROCESSES_LOG"
_WORKERS = "python -c (xdist workers, inline children)"
_MODULE_KINDS = {
    "perfgate.engines.embedded.server": "embedded engine server",
    "perfgate.engines.supervise": "server supervisor",
    "pytest": "pytest",
    "pip": "pip",
}
TICKS_PER_S = 100  # AHZ: the unit of a v3 accounting record's CPU times on Linux
SITECUSTOMIZE = f'''
import atexit, json, os, resource, sys

def _log(entry):
    try:
        with open(os.environ["{LOG_ENV}"], "a") as log:
            log.write(json.dumps(entry) + "\\n")
    except (KeyError, OSError):
        pass

def _started():
    argv = sys.argv[:6]
    if argv[:1] == ["-m"]:  # the module's name is only in orig_argv before runpy runs it
        module = sys.orig_argv[len(sys.orig_argv) - len(sys.argv)]  # "-mNAME" in one word too
        argv = ["-m", module[2:] if module.startswith("-m") else module, *sys.argv[1:5]]
    _log({{"pid": os.getpid(), "ppid": os.getppid(), "started": argv}})

def _census():
    own = resource.getrusage(resource.RUSAGE_SELF)
    _log({{"cpu_s": own.ru_utime + own.ru_stime, "argv": sys.argv[:6]}})

_started()
atexit.register(_census)
'''


@dataclass(frozen=True)
class Process:
    cpu_s: float
    argv: tuple[str, ...]


def kind(argv: Sequence[str]) -> str:
    """What a process was, from its command line."""
    if not argv or argv[0] == "-c":
        return _WORKERS
    if argv[0] == "-m":  # as a process started: -m MODULE ARGS
        module = argv[1] if len(argv) > 1 else ""
        if module == "perfgate" and len(argv) > 2:
            return f"perfgate {argv[2]}"
        return _MODULE_KINDS.get(module, f"python -m {module}")
    if argv[0] == "-":
        return "python - (a script on stdin)"
    first = Path(argv[0])
    if first.name == "supervise.py":
        return "server supervisor"
    if "perfgate.engines.embedded.server" in argv or argv[0].endswith("embedded/server.py"):
        return "embedded engine server"
    if first.name == "__main__.py":
        package = first.parent.name
        if package == "perfgate" and len(argv) > 1:
            return f"perfgate {argv[1]}"
        return package
    if first.parent.name == "benchmarks":
        return f"benchmarks/{first.name}"
    return first.name


def read_log(path: Path) -> list[Process]:
    """The processes that logged their CPU as they exited."""
    processes = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "cpu_s" in entry:
            processes.append(Process(entry["cpu_s"], tuple(entry["argv"])))
    return processes


def read_starts(path: Path) -> dict[int, tuple[int, tuple[str, ...]]]:
    """pid -> (parent pid, command line) of each Python process that logged its start."""
    starts = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "started" in entry:
            starts[entry["pid"]] = (entry["ppid"], tuple(entry["started"]))
    return starts


@dataclass(frozen=True)
class Accounted:
    """One process as the kernel's accounting recorded it when it ended."""

    pid: int
    ppid: int  # the parent when it ended: an orphan's is whoever adopted it
    command: str  # the kernel's 15-character name of its last thread
    cpu_s: float


def read_accounting(dump: str) -> list[Accounted]:
    """The records of `dump-acct FILE`: name|version|utime|stime|elapsed|uid|gid|memory|io|pid|
    ppid|..., times in ticks."""
    records = []
    for line in dump.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 11 or fields[1] != "v3":
            continue
        cpu_ticks = float(fields[2]) + float(fields[3])
        records.append(
            Accounted(int(fields[9]), int(fields[10]), fields[0], cpu_ticks / TICKS_PER_S)
        )
    return records


def every_process(
    records: Sequence[Accounted], starts: dict[int, tuple[int, tuple[str, ...]]], root: int
) -> list[tuple[str, Process]]:
    """(kind, process) for each record below `root` (the pytest process) or `root` itself: a
    logged start names it; else a Python process's nearest logged ancestor, or its own name."""
    parent = {r.pid: r.ppid for r in records} | {pid: ppid for pid, (ppid, _) in starts.items()}

    def ancestors(pid: int) -> Iterator[int]:
        seen = set()
        while pid in parent and pid not in seen:
            seen.add(pid)
            pid = parent[pid]
            yield pid

    named = []
    for record in records:
        if record.pid != root and root not in ancestors(record.pid):
            continue  # another process of the machine
        if record.pid in starts:
            argv = starts[record.pid][1]
            named.append((kind(argv), Process(record.cpu_s, argv)))
            continue
        name = record.command
        if name.startswith("python"):
            logged = next((pid for pid in ancestors(record.pid) if pid in starts), None)
            under = kind(starts[logged][1]) if logged is not None else "nothing logged"
            name = f"Python that logged no start, under: {under}"
        named.append((name, Process(record.cpu_s, (record.command,))))
    return named


def table(processes: Sequence[Process], whole_cpu_s: float, wall_s: float, top: int) -> str:
    logged = sum(p.cpu_s for p in processes)
    lines = [
        f"{len(processes)} Python processes logged {logged:.0f} CPU s; the run's processes took "
        f"{whole_cpu_s:.0f} CPU s in all (pytest's own included), {wall_s:.0f} s of wall.",
    ]
    return _by_kind(lines, [(kind(p.argv), p) for p in processes], whole_cpu_s, top)


def accounting_table(named: Sequence[tuple[str, Process]], wall_s: float, top: int) -> str:
    whole = sum(p.cpu_s for _, p in named)
    lines = [
        f"Process accounting: {len(named)} processes of the run took {whole:.0f} CPU s "
        f"(pytest's own included), {wall_s:.0f} s of wall.",
    ]
    return _by_kind(lines, named, whole, top)


def _by_kind(
    head: list[str], named: Sequence[tuple[str, Process]], whole_cpu_s: float, top: int
) -> str:
    lines = [
        *head,
        "",
        "| kind | processes | CPU s | share of the whole | CPU s each |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, (count, cpu) in _totals(named)[:top]:
        share = cpu / whole_cpu_s if whole_cpu_s else 0.0
        lines.append(f"| {name} | {count} | {cpu:.1f} | {share:.1%} | {cpu / count:.2f} |")
    return "\n".join(lines) + "\n"


class AccountingUnavailable(Exception):
    pass


@contextlib.contextmanager
def accounting(folder: Path) -> Iterator[Path]:
    """Process accounting on into `folder`/pacct for the block, and off after it."""
    file = folder / "pacct"
    file.touch()
    for tool in ("accton", "dump-acct"):
        if shutil.which(tool) is None:
            raise AccountingUnavailable(
                f"--accounting: {tool} is not on PATH; install Debian's acct package "
                "(apt-get install acct), or run without --accounting"
            )
    turned_on = subprocess.run(["accton", str(file)], capture_output=True, text=True)
    if turned_on.returncode != 0:
        why = turned_on.stderr.strip() or f"exit {turned_on.returncode}"
        raise AccountingUnavailable(
            f"--accounting: accton {file} failed ({why}); process accounting needs root, "
            "or run without --accounting"
        )
    try:
        yield file
    finally:
        subprocess.run(["accton", "off"], capture_output=True, check=False)


def _totals(pairs: Iterable[tuple[str, Process]]) -> list[tuple[str, tuple[int, float]]]:
    count: dict[str, int] = defaultdict(int)
    cpu: dict[str, float] = defaultdict(float)
    for name, process in pairs:
        count[name] += 1
        cpu[name] += process.cpu_s
    return sorted(((n, (count[n], cpu[n])) for n in cpu), key=lambda item: -item[1][1])


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    ours, pytest_args = (
        (args_in[: args_in.index("--")], args_in[args_in.index("--") + 1 :])
        if "--" in args_in
        else (args_in, [])
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the tables here too (markdown)")
    parser.add_argument("--top", type=int, default=25, help="rows of the table (25)")
    parser.add_argument(
        "--accounting",
        action="store_true",
        help="count every process through the kernel's process accounting (root, acct)",
    )
    args = parser.parse_args(ours)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
        log = folder / "processes.jsonl"
        log.touch()
        try:
            with accounting(folder) if args.accounting else contextlib.nullcontext() as pacct:
                code, pid, whole, wall = _run_pytest(pytest_args, folder, log)
        except AccountingUnavailable as error:
            print(f"suite_processes.py: error: {error}", file=sys.stderr)
            return 69
        text = table(read_log(log), whole, wall, args.top)
        if pacct is not None:
            dump = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True)
            named = every_process(read_accounting(dump.stdout), read_starts(log), pid)
            text += "\n" + accounting_table(named, wall, args.top)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return code


def _run_pytest(
    pytest_args: Sequence[str], folder: Path, log: Path
) -> tuple[int, int, float, float]:
    """pytest's exit code and pid, its processes' whole CPU and its wall time."""
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), LOG_ENV: str(log)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = os.times().elapsed
    with subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], env=env) as pytest:
        code = pytest.wait()
    wall = os.times().elapsed - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, pytest.pid, whole, wall


if __name__ == "__main__":
    sys.exit(main())
