"""benchmarks/trace_gaps.py: the GPU's idle time per decode cycle, from a trace."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import trace_gaps


def gpu(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, object]:
    return {"name": name, "cat": cat, "ts": ts, "dur": dur, "ph": "X"}


SYNC = "Memcpy DtoH (Device -> Pageable)"
# Two cycles of 100 µs each: after each sync the GPU waits 40 µs, runs two overlapping kernels
# (busy 30 µs), waits 10 µs, then a kernel of 15 µs and the next sync of 5 µs.
EVENTS = [
    gpu(SYNC, 0, 5, "gpu_memcpy"),
    gpu("draft_extend_gather", 45, 20), gpu("overlapping", 55, 20),
    gpu("verify", 85, 15), gpu(SYNC, 100, 5, "gpu_memcpy"),
    gpu("draft_extend_gather", 145, 20), gpu("overlapping", 155, 20),
    gpu("verify", 185, 15), gpu(SYNC, 200, 5, "gpu_memcpy"),
    {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 1, "dur": 1},
]  # fmt: skip


def test_each_cycle_is_the_gpu_s_work_between_two_syncs_overlaps_merged() -> None:
    found = trace_gaps.cycles(trace_gaps.gpu_events({"traceEvents": EVENTS}), gap_us=5)
    assert [(c.span_us, c.busy_us, c.idle_us) for c in found] == [(100, 50, 50), (100, 50, 50)]
    assert found[0].gaps == ((0, 40, "draft_extend_gather"), (70, 10, "verify"))


def test_the_report_says_how_much_of_an_unprofiled_cycle_waits_on_the_host(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": EVENTS}, handle)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "trace_gaps.py"), str(path),
         "--unprofiled-cycle-ms", "0.08"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert (
        "2 cycles (between device-to-host copies), medians: span 0.100 ms, GPU busy 0.050 ms, idle 0.050 ms (50% of the cycle)"
        in done.stdout
    )
    assert (
        "unprofiled cycle 0.080 ms: the GPU's 0.050 ms busy leave 0.030 ms (38%) waiting on the host"
        in done.stdout
    )
    assert "| 0 | 40 | `draft_extend_gather` |" in done.stdout


def test_an_unreadable_trace_exits_66_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    assert trace_gaps.main([str(path)]) == 66
