"""Where the embedded engine's server threads run during one launch: CPUs and NUMA nodes.

    python benchmarks/server_placement.py --out placement.jsonl --label 3 --stop FILE &
    perfgate run ...; touch FILE; wait

Samples every ``--every`` seconds, until FILE exists (or ``--timeout-s``), each live process
of ``perfgate.engines.embedded.server``: per server mode (``spec`` when it drafts, else
``plain``), the CPU each of its threads last ran on (field 39 of /proc/PID/task/TID/stat), the
NUMA node of that CPU, and the CPUs it may use. Appends one JSON line for the launch: per
mode, samples per CPU and per node, and the busiest thread's CPUs. A launch of the GPU
scenario whose host loop runs slow can so be told apart by where it ran
(benchmarks/gpu_gate_proof.sh joins the lines with each run's figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_probes import cpu_node

SERVER = b"perfgate.engines.embedded.server"


def servers() -> dict[int, str]:
    """The live embedded servers: pid -> mode."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(SERVER in arg for arg in argv):
            found[int(entry.name)] = "spec" if b"--speculative-algorithm" in argv else "plain"
    return found


def thread_cpus(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: the CPU it last ran on, and its CPU time so far (ticks)."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        threads[int(task.name)] = (int(fields[36]), int(fields[11]) + int(fields[12]))
    return threads


def sample(seconds: float, every: float, stop: Path | None) -> dict[str, dict[str, object]]:
    """Sample until ``stop`` exists or ``seconds`` pass; per mode, where its threads ran."""
    per_mode: dict[str, dict[str, Counter[int]]] = {}
    busiest: dict[str, dict[int, tuple[int, int]]] = {}
    allowed: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (stop and stop.exists()):
        for pid, mode in servers().items():
            counts = per_mode.setdefault(mode, {"cpus": Counter(), "nodes": Counter()})
            threads = thread_cpus(pid)
            for cpu, _ticks in threads.values():
                counts["cpus"][cpu] += 1
                node = cpu_node(cpu)
                counts["nodes"][node if node is not None else -1] += 1
            if threads:
                tid, (cpu, ticks) = max(threads.items(), key=lambda kv: kv[1][1])
                busiest.setdefault(mode, {})[cpu] = (tid, ticks)
            with contextlib.suppress(OSError):
                allowed[mode] = len(os.sched_getaffinity(pid))
        time.sleep(every)
    return {
        mode: {
            "cpus": dict(sorted(counts["cpus"].items())),
            "nodes": dict(sorted(counts["nodes"].items())),
            "busiest_thread_cpus": sorted(busiest.get(mode, {})),
            "allowed_cpus": allowed.get(mode),
        }
        for mode, counts in per_mode.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per launch")
    parser.add_argument("--label", required=True)
    parser.add_argument("--stop", type=Path, default=None, help="stop once this file exists")
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    found = sample(args.timeout_s, args.every, args.stop)
    with args.out.open("a") as handle:
        handle.write(json.dumps({"label": args.label, **found}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
