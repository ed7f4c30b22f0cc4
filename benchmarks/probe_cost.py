"""What the probe costs per decode cycle, in microseconds: the mechanism, without the model.

    python benchmarks/probe_cost.py                  # CUDA if there is a GPU, else CPU
    python benchmarks/probe_cost.py --cycle-ms 5.2   # also as a share of a 5.2 ms cycle

``benchmarks/probe_overhead.py`` measures the probe's cost in tok/s, the figure users care
about, but a GPU host's block-to-block noise (on an H200, +-3% of tok/s between identical
blocks in one process) hides a cost of a few tenths of a percent. This measures the cost
itself: a stand-in worker whose cycle runs the embedded engine's four phases, each launching
one small kernel, and ends by reading a value back (as the engine reads the accepted tokens),
so the loop is bound by the CPU, where the probe's work lands. Blocks of cycles with the
probe's wrappers on and off alternate; the probe's cost per cycle is the median difference
of paired blocks. Over a real cycle's time it bounds the probe's share from above: on a GPU
that runs ahead of the CPU, part of the probe's CPU time is hidden.

Prints a table; writes ``probe-cost.json`` to --out if given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from perfgate import metrics
from perfgate.probe import runtime
from perfgate.probe.reader import read_records
from perfgate.probe.targets import ProbeTarget


class StandInWorker:
    """The embedded engine's cycle with one small kernel per phase and a read-back."""

    def __init__(self, device: torch.device) -> None:
        self.x = torch.zeros(64, device=device)

    def cycle(self) -> float:
        self.draft()
        self.verify()
        self.accept()
        self.draft_extend()
        return float(self.x[0])  # the engine reads the accepted tokens back every cycle

    def draft(self) -> None:
        self.x.add_(1.0)

    def verify(self) -> None:
        self.x.add_(1.0)

    def accept(self) -> None:
        self.x.add_(1.0)

    def draft_extend(self) -> None:
        self.x.add_(1.0)


TARGETS = [
    ProbeTarget(__name__, "StandInWorker", method, phase)
    for method, phase in (
        ("cycle", metrics.CYCLE),
        ("draft", metrics.DRAFT),
        ("verify", metrics.VERIFY),
        ("accept", metrics.ACCEPT),
        ("draft_extend", metrics.DRAFT_EXTEND),
    )
]


def switch(on: bool) -> None:
    module = sys.modules[__name__]
    (runtime.patch_class if on else runtime.unpatch_class)(module, TARGETS)


def us_per_cycle(worker: StandInWorker, cycles: int) -> float:
    started = time.perf_counter()
    for _ in range(cycles):
        worker.cycle()
    return (time.perf_counter() - started) / cycles * 1e6


def measure(every: int, pairs: int, cycles: int, device: torch.device) -> dict[str, Any]:
    """Pairs of blocks, probe on and off in alternating order, at one stride."""
    with tempfile.TemporaryDirectory() as folder:
        runtime._out_dir, runtime._every, runtime._probe = Path(folder), every, None
        worker = StandInWorker(device)
        switch(True)
        us_per_cycle(worker, cycles)  # warm up, and let the probe pick its clock
        switch(False)
        us_per_cycle(worker, cycles)
        on: list[float] = []
        off: list[float] = []
        for pair in range(pairs):
            for probe in (pair % 2 == 0, pair % 2 == 1):
                switch(probe)
                (on if probe else off).append(us_per_cycle(worker, cycles))
        switch(False)
        active = runtime._probe
        clock = active._clock.name if active is not None and active._clock is not None else "none"
        if active is not None:
            active.close()
        timed = sum(1 for r in read_records(Path(folder)) if r.kind == metrics.CYCLE)
    cost = statistics.median(a - b for a, b in zip(on, off, strict=True))
    return {
        "every": every,
        "clock": clock,
        "pairs": pairs,
        "cycles_per_block": cycles,
        "us_per_cycle_on": statistics.median(on),
        "us_per_cycle_off": statistics.median(off),
        "probe_us_per_cycle": cost,
        "cycles_timed": timed,
    }


def timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def primitive_us(calls: int = 20_000) -> dict[str, float]:
    """CPU microseconds per call of what a timed cycle does on CUDA, one by one."""
    events = [timing_event() for _ in range(calls)]
    done = timing_event()
    done.record()
    torch.cuda.synchronize()

    def per_call(action: Any) -> float:
        started = time.perf_counter()
        for item in events:
            action(item)
        return (time.perf_counter() - started) / calls * 1e6

    clock = runtime._CudaClock()
    clock.release(events)
    figures = {
        "record (pooled event)": per_call(lambda e: e.record()),
        "the probe's mark": per_call(lambda e: clock.mark()),
        "current_stream()": per_call(lambda e: torch.cuda.current_stream()),
        "is_current_stream_capturing()": per_call(
            lambda e: torch.cuda.is_current_stream_capturing()
        ),
    }
    torch.cuda.synchronize()
    figures["query (finished)"] = per_call(lambda e: e.query())
    figures["elapsed_time (finished)"] = per_call(lambda e: done.elapsed_time(e))
    figures["create + record"] = per_call(lambda e: timing_event().record())
    torch.cuda.synchronize()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", default="1,4", help="strides to measure (default 1,4)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per block")
    parser.add_argument("--cycle-ms", type=float, help="a real cycle's time, for the share")
    parser.add_argument("--device", help="default: cuda if available, else cpu")
    parser.add_argument("--out", type=Path, help="folder for probe-cost.json")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = [measure(int(e), args.pairs, args.cycles, device) for e in args.every.split(",")]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"probe cost per decode cycle on {name} ({args.pairs} pairs of {args.cycles} cycles)")
    print("| stride | clock | us/cycle on | us/cycle off | probe us/cycle | share |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        share = row["probe_us_per_cycle"] / (args.cycle_ms * 1e3) if args.cycle_ms else None
        row["share_of_cycle"] = share
        print(
            f"| {row['every']} | {row['clock']} | {row['us_per_cycle_on']:.1f} "
            f"| {row['us_per_cycle_off']:.1f} | {row['probe_us_per_cycle']:.1f} "
            f"| {'' if share is None else f'{share:.2%} of {args.cycle_ms} ms'} |"
        )
    primitives = primitive_us() if device.type == "cuda" else {}
    for what, us in primitives.items():
        print(f"{what}: {us:.2f} us per call")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        document = {
            "device": name,
            "torch": torch.__version__,
            "rows": rows,
            "primitives_us": primitives,
        }
        (args.out / "probe-cost.json").write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
