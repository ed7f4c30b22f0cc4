"""Are a machine's CPUs alike? The host side's speed on each CPU, in rounds.

    python benchmarks/host_cpus.py --out DIR [--rounds 3]     # CUDA where torch sees a GPU

The GPU scenario's slow launches (benchmarks/results/h200-overlap.md: 6 of 18) ran every host
phase 1.5 times slower (prefill, accept) with the GPU's own work unchanged, and a launch's
state held for its whole life: a property of the process, not of the hour. One such property
is the CPU its threads run on. A lent machine is a slice of a larger host whose CPUs the
guest may see as one NUMA node while they sit on two sockets, or share cores with other
tenants; a process that starts on one and is moved to another keeps its memory where it
started. This pins itself to each allowed CPU in turn, ROUNDS times (the order reversed every
other round, so that a drift of the machine falls on all alike), and times there: a fixed
piece of Python (benchmarks/host_probes.py), a read of a 256 MiB host buffer first touched on
the CPU the process started on (remote memory reads slower), and on CUDA a kernel's launch
with and without a sync. /proc/stat's steal time (the hypervisor running something else) is
read per CPU across the whole run.

If a CPU's figures stay apart from the others' round after round, the CPUs are not alike and
where a server's threads land can decide its speed; if every CPU scatters as much within its
rounds as the CPUs do among themselves, the state is not the CPU's. Writes results.json and
results.md; exit 0, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from host_probes import cpu_node, cuda_launch_us, python_loop_us


def steal_ticks() -> dict[int, int]:
    """Each CPU's steal time so far (clock ticks, /proc/stat's eighth field); {} elsewhere."""
    found: dict[int, int] = {}
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 8:
                found[int(name[3:])] = int(fields[7])
    except OSError:
        pass
    return found


def read_gb_s(torch: Any, buffer: Any, repeats: int = 3) -> float:
    """GB/s of summing ``buffer`` on this thread, the best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - began)
    return float(buffer.numel() * buffer.element_size() / best / 1e9)


def probe_here(torch: Any, buffer: Any) -> dict[str, float | None]:
    """Every probe, on the CPU this thread is pinned to."""
    time.sleep(0.05)  # let the move settle
    found: dict[str, float | None] = {
        "python_loop_us": python_loop_us(rounds=3),
        "read_gb_s": read_gb_s(torch, buffer),
    }
    launch: dict[str, float | None] = {"launch_us": None, "launch_sync_us": None}
    found.update(cuda_launch_us(torch) or launch)
    return found


def measure(rounds: int, mib: int) -> dict[str, Any]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(torch, rounds, mib)
    finally:
        torch.set_num_threads(threads)


def _measure(torch: Any, rounds: int, mib: int) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    home = os.sched_getaffinity(0)
    started_on = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36]
    buffer = torch.ones(mib * 2**20 // 4, dtype=torch.float32)  # first touched here
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # the context, before any timing
    steal_before, began = steal_ticks(), time.monotonic()
    samples: dict[int, list[dict[str, float | None]]] = {c: [] for c in cpus}
    try:
        for r in range(rounds):
            for cpu in cpus if r % 2 == 0 else reversed(cpus):
                os.sched_setaffinity(0, {cpu})
                samples[cpu].append(probe_here(torch, buffer))
    finally:
        os.sched_setaffinity(0, home)
    seconds = time.monotonic() - began
    steal_after = steal_ticks()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return {
        "rounds": rounds,
        "buffer_mib": mib,
        "started_on_cpu": int(started_on),
        "seconds": seconds,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpus": [
            {
                "cpu": cpu,
                "node": cpu_node(cpu),
                "steal_share": (steal_after.get(cpu, 0) - steal_before.get(cpu, 0)) / tick / seconds
                if cpu in steal_before
                else None,
                "samples": samples[cpu],
            }
            for cpu in cpus
        ],
    }


PROBES = (
    ("python_loop_us", "Python loop us", "{:.0f}"),
    ("read_gb_s", "read GB/s", "{:.2f}"),
    ("launch_us", "launch us", "{:.1f}"),
    ("launch_sync_us", "launch+sync us", "{:.1f}"),
)


def _values(row: dict[str, Any], probe: str) -> list[float]:
    return [s[probe] for s in row["samples"] if s.get(probe) is not None]


def spread(results: dict[str, Any], probe: str) -> tuple[float, float] | None:
    """Across CPUs: the slowest CPU's median over the fastest's, less one; within a CPU: the
    median over CPUs of (its rounds' largest over smallest, less one). None without values."""
    rows = [_values(r, probe) for r in results["cpus"]]
    rows = [v for v in rows if v]
    if not rows:
        return None
    medians = [statistics.median(v) for v in rows]
    within = statistics.median(max(v) / min(v) - 1 for v in rows)
    return max(medians) / min(medians) - 1, within


def render(results: dict[str, Any]) -> str:
    shown = [p for p in PROBES if spread(results, p[0]) is not None]
    lines = [
        f"# The host's CPUs, each timed {results['rounds']} times",
        "",
        f"{len(results['cpus'])} CPUs, {results['seconds']:.0f} s; GPU: {results['gpu'] or 'none'};"
        f" the {results['buffer_mib']} MiB buffer first touched on CPU "
        f"{results['started_on_cpu']}. Per CPU the median of its rounds (smallest to largest).",
        "",
        "| CPU | node | steal | " + " | ".join(p[1] for p in shown) + " |",
        "| ---: | ---: | ---: | " + " | ".join("---:" for _ in shown) + " |",
    ]
    for row in results["cpus"]:
        cells = []
        for probe, _, form in shown:
            v = _values(row, probe)
            cells.append(
                f"{form.format(statistics.median(v))} ({form.format(min(v))}-{form.format(max(v))})"
                if v
                else "-"
            )
        steal = "-" if row["steal_share"] is None else f"{row['steal_share']:.1%}"
        node = "-" if row["node"] is None else str(row["node"])
        lines.append(f"| {row['cpu']} | {node} | {steal} | " + " | ".join(cells) + " |")
    lines += ["", "| probe | across CPUs (slowest/fastest - 1) | within a CPU (median) |"]
    lines += ["| --- | ---: | ---: |"]
    for probe, name, _ in shown:
        across, within = spread(results, probe)  # type: ignore[misc]
        lines.append(f"| {name} | {across:.1%} | {within:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mib", type=int, default=256, help="the host buffer read, MiB")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.mib < 1:
        parser.error("--rounds and --mib: 1 or more")
    args.out.mkdir(parents=True, exist_ok=True)
    results = measure(args.rounds, args.mib)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = render(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
