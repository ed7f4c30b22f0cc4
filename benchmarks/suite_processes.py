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

Exit code: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "SUITE_PROCESSES_LOG"
_WORKERS = "python -c (xdist workers, inline children)"
SITECUSTOMIZE = f'''
import atexit, json, os, resource, sys

def _census():
    own = resource.getrusage(resource.RUSAGE_SELF)
    entry = {{
        "cpu_s": own.ru_utime + own.ru_stime,
        "argv": sys.argv[:6],
    }}
    try:
        with open(os.environ["{LOG_ENV}"], "a") as log:
            log.write(json.dumps(entry) + "\\n")
    except (KeyError, OSError):
        pass

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
    processes = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        processes.append(Process(entry["cpu_s"], tuple(entry["argv"])))
    return processes


def table(processes: Sequence[Process], whole_cpu_s: float, wall_s: float, top: int) -> str:
    logged = sum(p.cpu_s for p in processes)
    lines = [
        f"{len(processes)} Python processes logged {logged:.0f} CPU s; the run's processes took "
        f"{whole_cpu_s:.0f} CPU s in all (pytest's own included), {wall_s:.0f} s of wall.",
        "",
        "| kind | processes | CPU s | share of the whole | CPU s each |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    by_kind = _totals((kind(p.argv), p) for p in processes)
    for name, (count, cpu) in by_kind[:top]:
        lines.append(
            f"| {name} | {count} | {cpu:.1f} | {cpu / whole_cpu_s:.1%} | {cpu / count:.2f} |"
        )
    return "\n".join(lines) + "\n"


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
    args = parser.parse_args(ours)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        log = Path(folder) / "processes.jsonl"
        log.touch()
        paths = [folder, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), LOG_ENV: str(log)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = os.times().elapsed
        code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env)
        wall = os.times().elapsed - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        text = table(read_log(log), whole, wall, args.top)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
