"""How long the GPU idles in each decode cycle of a profiled embedded server, from its trace.

    python benchmarks/trace_gaps.py TRACE.json.gz [--unprofiled-cycle-ms MS] [--gap-us 15]

The embedded engine syncs with the host once per decode cycle (``Batch.start_commit``'s copy of the
committed tokens to the host: the trace's one ``Memcpy DtoH`` per cycle), so a cycle is the
GPU's work from the end of one such copy to the end of the next. Per cycle: its span, the
GPU's busy time (kernels and copies, overlaps merged) and the rest, idle: the GPU waiting for
the host to launch the next work. Then the medians, and one cycle's timeline of the gaps
longer than --gap-us (where in the cycle the GPU waits, and for what). A trace records what
the GPU ran whether or not the probe's phase marks are in it.

The profiler slows the host (its CPU events), not the kernels: with --unprofiled-cycle-ms
(the probe's median cycle of the same server unprofiled, `perfgate profile` prints it), the
idle share of an unprofiled cycle is estimated as that cycle less the GPU's busy time.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC = "DtoH"  # the name of the one device-to-host copy a cycle makes


@dataclass(frozen=True)
class Cycle:
    span_us: float
    busy_us: float
    gaps: tuple[tuple[float, float, str], ...]  # (offset in the cycle, gap, what came next)

    @property
    def idle_us(self) -> float:
        return self.span_us - self.busy_us


def gpu_events(trace: Any) -> list[dict[str, Any]]:
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    found = [e for e in events if e.get("cat") in GPU_CATEGORIES and "dur" in e]
    return sorted(found, key=lambda e: float(e["ts"]))


def cycles(events: Sequence[dict[str, Any]], gap_us: float = 15.0) -> list[Cycle]:
    """The cycles between consecutive device-to-host copies (the first starts after one)."""
    syncs = [i for i, e in enumerate(events) if SYNC in e.get("name", "")]
    found = []
    for first, last in itertools.pairwise(syncs):
        opened = float(events[first]["ts"]) + float(events[first]["dur"])
        end, busy, gaps = opened, 0.0, []
        for event in events[first + 1 : last + 1]:
            start, stop = float(event["ts"]), float(event["ts"]) + float(event["dur"])
            if start > end:
                if start - end > gap_us:
                    gaps.append((end - opened, start - end, str(event.get("name", ""))))
                busy += stop - start
            elif stop > end:
                busy += stop - end
            end = max(end, stop)
        found.append(Cycle(end - opened, busy, tuple(gaps)))
    return found


def report(found: Sequence[Cycle], unprofiled_cycle_ms: float | None) -> str:
    if not found:
        return "no cycle: the trace has fewer than two device-to-host copies\n"
    span = statistics.median(c.span_us for c in found) / 1e3
    busy = statistics.median(c.busy_us for c in found) / 1e3
    idle = statistics.median(c.idle_us for c in found) / 1e3
    lines = [
        f"{len(found)} cycles (between device-to-host copies), medians: span {span:.3f} ms, "
        f"GPU busy {busy:.3f} ms, idle {idle:.3f} ms ({idle / span:.0%} of the cycle)",
    ]
    if unprofiled_cycle_ms:
        rest = unprofiled_cycle_ms - busy
        lines.append(
            f"unprofiled cycle {unprofiled_cycle_ms:.3f} ms: the GPU's {busy:.3f} ms busy leave "
            f"{rest:.3f} ms ({rest / unprofiled_cycle_ms:.0%}) waiting on the host"
        )
    middle = sorted(found, key=lambda c: c.span_us)[len(found) // 2]
    lines += [
        "",
        "The median cycle's gaps:",
        "",
        "| at µs | gap µs | then |",
        "| ---: | ---: | --- |",
    ]
    lines += [f"| {at:.0f} | {gap:.0f} | `{name[:70]}` |" for at, gap, name in middle.gaps]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--unprofiled-cycle-ms", type=float)
    parser.add_argument("--gap-us", type=float, default=15.0)
    args = parser.parse_args(argv)
    opener = gzip.open if args.trace.name.endswith(".gz") else open
    try:
        with opener(args.trace, "rt") as handle:
            trace = json.load(handle)
    except (OSError, ValueError) as error:
        print(f"trace_gaps: {args.trace}: cannot read the trace: {error}", file=sys.stderr)
        return 66
    print(report(cycles(gpu_events(trace), args.gap_us), args.unprofiled_cycle_ms), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
