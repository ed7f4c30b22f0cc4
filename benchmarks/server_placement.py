"""Where the embedded engine's server threads run during one launch: CPUs and NUMA nodes.

    python benchmarks/server_placement.py --out placement.jsonl --label 3 --stop FILE &
    perfgate run ...; touch FILE; wait

Samples every ``--every`` seconds, until FILE exists (or ``--timeout-s``), each live process
of ``perfgate.engines.embedded.server``: per server mode (``spec`` when it drafts, else
``plain``), the CPU each of its threads last ran on (field 39 of /proc/PID/task/TID/stat), the
NUMA node of that CPU, and the CPUs it may use. With each sample it also times, in its own
process pinned for the moment to the CPU the server's busiest thread last ran on, a fixed
piece of Python (a quarter of benchmarks/host_probes.py's loop, 0.3-0.4 ms), reads the
machine's steal time (/proc/stat: the hypervisor running something else) and how much of
the server's memory transparent huge pages back (/proc/PID/smaps_rollup): the host's speed
where each server ran, seen from outside the server, and one property of the server's own
process. The loop takes under 0.05% of the server's CPU; the series' launches carry it and
the verdicts do not.
Appends one JSON line for the launch: per mode, samples per CPU and per node, the busiest
thread's CPUs, the sidecar loop's median and range (us), the share of CPU time stolen and
the most memory in huge pages (kB). A launch of the GPU scenario whose host loop runs slow
can so be told apart by where it ran, and a slow state of the machine or of its CPU (the
sidecar slow too) from one of the server's own process (the sidecar as fast as in the other
launches); benchmarks/gpu_gate_proof.sh joins the lines with each run's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_probes import cpu_node, huge_pages_kb, python_loop_us

SERVER = b"perfgate.engines.embedded.server"
# The sidecar's loop: a quarter of host_probes.py's (about 0.4 ms on a 2-3 GHz core), so that
# timing it on a server's CPU once a second takes under 0.05% of that CPU from the server.
LOOP_N = 5_000


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


def steal_and_total() -> tuple[int, int]:
    """The machine's steal time and all its CPU time so far (ticks, /proc/stat's cpu line)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def loop_on(cpu: int, home: set[int]) -> float:
    """The fixed piece of Python's time (us) on ``cpu``, where the server's busiest thread
    last ran; this process keeps to its own CPUs (``home``) otherwise."""
    with contextlib.suppress(OSError):  # a CPU not ours to use: time it where we are
        os.sched_setaffinity(0, {cpu})
    try:
        return python_loop_us(rounds=1, n=LOOP_N)
    finally:
        os.sched_setaffinity(0, home)


def sample(seconds: float, every: float, stop: Path | None) -> dict[str, dict[str, object]]:
    """Sample until ``stop`` exists or ``seconds`` pass; per mode, where its threads ran and
    how fast the machine's host side was meanwhile."""
    per_mode: dict[str, dict[str, Counter[int]]] = {}
    busiest: dict[str, dict[int, tuple[int, int]]] = {}
    allowed: dict[str, int] = {}
    loops: dict[str, list[float]] = {}
    stolen: dict[str, list[int]] = {}  # per mode: steal ticks, all ticks while it ran
    deadline = time.monotonic() + seconds
    last = steal_and_total()
    huge: dict[str, int] = {}  # per mode: the most anonymous memory in huge pages, kB
    home = os.sched_getaffinity(0)
    while time.monotonic() < deadline and not (stop and stop.exists()):
        live = servers()
        now = steal_and_total()
        for mode in set(live.values()):
            window = stolen.setdefault(mode, [0, 0])
            window[0] += now[0] - last[0]
            window[1] += now[1] - last[1]
        last = now
        for pid, mode in live.items():
            counts = per_mode.setdefault(mode, {"cpus": Counter(), "nodes": Counter()})
            threads = thread_cpus(pid)
            for cpu, _ticks in threads.values():
                counts["cpus"][cpu] += 1
                node = cpu_node(cpu)
                counts["nodes"][node if node is not None else -1] += 1
            if threads:
                tid, (cpu, ticks) = max(threads.items(), key=lambda kv: kv[1][1])
                busiest.setdefault(mode, {})[cpu] = (tid, ticks)
                loops.setdefault(mode, []).append(loop_on(cpu, home))
            with contextlib.suppress(OSError):
                allowed[mode] = len(os.sched_getaffinity(pid))
            pages = huge_pages_kb(pid)
            if pages is not None:
                huge[mode] = max(huge.get(mode, 0), pages)
        time.sleep(every)
    return {
        mode: {
            "cpus": dict(sorted(counts["cpus"].items())),
            "nodes": dict(sorted(counts["nodes"].items())),
            "busiest_thread_cpus": sorted(busiest.get(mode, {})),
            "allowed_cpus": allowed.get(mode),
            **_host_speed(loops.get(mode, []), stolen.get(mode, [0, 0])),
            "anon_huge_pages_kb": huge.get(mode),
        }
        for mode, counts in per_mode.items()
    }


def _host_speed(loops: list[float], ticks: list[int]) -> dict[str, object]:
    """The sidecar loop's median and range (us), and the share of CPU time stolen."""
    if not loops:
        return {"sidecar_loop_us": None, "sidecar_loop_range_us": None, "steal_share": None}
    ordered = sorted(loops)
    return {
        "sidecar_loop_us": round(statistics.median(ordered), 1),
        "sidecar_loop_range_us": [round(ordered[0], 1), round(ordered[-1], 1)],
        "steal_share": round(ticks[0] / ticks[1], 4) if ticks[1] > 0 else None,
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
