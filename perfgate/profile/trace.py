"""Read a torch.profiler trace (Chrome trace format) and split its work by phase and category.

The probe marks each phase call as a ``record_function`` range named after the phase
(``draft``, ``verify``, ``accept``, ``draft_extend``, inside ``cycle``; ``prefill`` apart):
in the trace these are ``user_annotation`` events on the thread that ran them. Work is
charged to the innermost phase range around it; work inside a ``cycle`` range but in no
named phase is ``other``, as everywhere in perfgate.

- On a GPU the work is the device's: kernels and memory copies (``kernel``, ``gpu_memcpy``,
  ``gpu_memset`` events), each charged to the phase whose range was open on the CPU thread
  when its launch (the ``cuda_runtime`` or ``cuda_driver`` event with the same
  ``correlation``; a CUDA graph launch for every kernel of the graph) was made. A kernel whose
  launch is not in the trace is charged by the GPU-side copy of the ranges
  (``gpu_user_annotation``) it ran inside, if any.
- On a CPU (a trace without kernels) the work is each operator's *self* time (its time
  minus that of the operators it called), so nothing is counted twice.

Everything here but ``load_trace`` is pure.
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.errors import InfrastructureError
from perfgate.profile.categories import CATEGORIES, categorize, inherited

PHASE_NAMES = frozenset(metrics.PROBED_PHASES)
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_KERNELS = "GPU kernels"
CPU_OPS = "CPU operators (self time)"


@dataclass(frozen=True)
class Span:
    """One complete event of the trace."""

    name: str
    cat: str
    pid: Any
    tid: Any
    start_us: float
    dur_us: float
    correlation: int | None = None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class Breakdown:
    """Work per phase and category, in microseconds over the whole profiled window."""

    source: str  # GPU_KERNELS or CPU_OPS
    cycles: int  # cycle ranges in the trace
    us: dict[str, dict[str, float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # kernels or ops per phase
    unattributed_us: float = 0.0  # work outside every phase range
    # phase -> (kernel or op name, category) -> microseconds: what a category is made of
    by_name: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)

    def add(self, phase: str | None, category: str, dur_us: float, name: str = "") -> None:
        if phase is None:
            self.unattributed_us += dur_us
            return
        row = self.us.setdefault(phase, dict.fromkeys(CATEGORIES, 0.0))
        row[category] += dur_us
        self.counts[phase] = self.counts.get(phase, 0) + 1
        names = self.by_name.setdefault(phase, {})
        names[(name, category)] = names.get((name, category), 0.0) + dur_us

    def top(self, phase: str, n: int) -> list[tuple[str, str, float]]:
        """The `n` kernels (or ops) that took longest in `phase`: name, category, microseconds."""
        found = self.by_name.get(phase, {})
        ranked = sorted(found.items(), key=lambda item: -item[1])[:n]
        return [(name, category, us) for (name, category), us in ranked]


def load_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file (``.json`` or ``.json.gz``)."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError, EOFError) as error:  # EOFError: a gzip stream cut short
        raise InfrastructureError(f"cannot read the profiler's trace {path}: {error}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise InfrastructureError(f"{path} is not a Chrome trace: it has no traceEvents list")
    return events


def parse_spans(events: Iterable[Mapping[str, Any]]) -> list[Span]:
    """The complete ("X") events, as spans."""
    spans = []
    for event in events:
        if event.get("ph") != "X" or "dur" not in event or "ts" not in event:
            continue
        args = event.get("args") or {}
        correlation = args.get("correlation")
        spans.append(
            Span(
                name=str(event.get("name", "")),
                cat=str(event.get("cat", "")),
                pid=event.get("pid"),
                tid=event.get("tid"),
                start_us=float(event["ts"]),
                dur_us=float(event["dur"]),
                correlation=correlation if isinstance(correlation, int) else None,
            )
        )
    return spans


def phase_breakdown(spans: Sequence[Span]) -> Breakdown:
    """Split the trace's work by phase and category (see the module's docstring)."""
    ranges = [s for s in spans if s.cat == "user_annotation" and s.name in PHASE_NAMES]
    cycles = sum(1 for s in ranges if s.name == metrics.CYCLE)
    cpu_phases = PhaseLookup(ranges)
    if any(s.cat in DEVICE_CATS for s in spans):
        breakdown = Breakdown(GPU_KERNELS, cycles)
        _charge_kernels(spans, cpu_phases, breakdown)
    else:
        breakdown = Breakdown(CPU_OPS, cycles)
        _charge_cpu_ops(spans, cpu_phases, breakdown)
    return breakdown


class PhaseLookup:
    """Which phase range is innermost at a moment on a thread: nested ranges flattened."""

    def __init__(self, ranges: Iterable[Span]) -> None:
        by_thread: dict[tuple[Any, Any], list[Span]] = {}
        for span in ranges:
            by_thread.setdefault((span.pid, span.tid), []).append(span)
        self._segments = {key: _flatten(found) for key, found in by_thread.items()}
        self._starts = {key: [s[0] for s in segs] for key, segs in self._segments.items()}

    def phase_at(self, pid: Any, tid: Any, moment_us: float) -> str | None:
        """The phase of the innermost range open at `moment_us` (a cycle's own time is
        ``other``), or None outside every range."""
        key = (pid, tid)
        segments = self._segments.get(key)
        if not segments:
            return None
        index = bisect.bisect_right(self._starts[key], moment_us) - 1
        if index < 0:
            return None
        start, end, name = segments[index]
        if not start <= moment_us <= end:
            return None
        return metrics.OTHER if name == metrics.CYCLE else name


def _flatten(ranges: Sequence[Span]) -> list[tuple[float, float, str]]:
    """Properly nested ranges as disjoint segments, each named after its innermost range."""
    segments: list[tuple[float, float, str]] = []
    open_ranges: list[tuple[float, str]] = []  # (end, name), innermost last
    cursor = 0.0
    for span in sorted(ranges, key=lambda s: (s.start_us, -s.dur_us)):
        while open_ranges and open_ranges[-1][0] <= span.start_us:
            end, name = open_ranges.pop()
            segments.append((cursor, end, name))
            cursor = end
        end = span.end_us
        if open_ranges:
            segments.append((cursor, span.start_us, open_ranges[-1][1]))
            end = min(end, open_ranges[-1][0])  # a range never outlives the one around it
        open_ranges.append((end, span.name))
        cursor = span.start_us
    while open_ranges:
        end, name = open_ranges.pop()
        segments.append((cursor, end, name))
        cursor = end
    return [s for s in segments if s[1] > s[0]]


def _charge_kernels(spans: Sequence[Span], cpu_phases: PhaseLookup, out: Breakdown) -> None:
    launches: dict[int | None, Span] = {
        s.correlation: s for s in spans if s.cat in LAUNCH_CATS and s.correlation is not None
    }
    gpu_ranges = [s for s in spans if s.cat == "gpu_user_annotation" and s.name in PHASE_NAMES]
    gpu_phases = PhaseLookup(gpu_ranges)
    for span in spans:
        if span.cat not in DEVICE_CATS:
            continue
        launch = launches.get(span.correlation)
        if launch is not None:
            phase = cpu_phases.phase_at(launch.pid, launch.tid, launch.start_us)
        else:
            phase = gpu_phases.phase_at(span.pid, span.tid, span.start_us)
        out.add(phase, categorize(span.name), span.dur_us, span.name)


def _charge_cpu_ops(spans: Sequence[Span], cpu_phases: PhaseLookup, out: Breakdown) -> None:
    ops: dict[tuple[Any, Any], list[Span]] = {}
    for span in spans:
        if span.cat == "cpu_op":
            ops.setdefault((span.pid, span.tid), []).append(span)
    for thread_ops in ops.values():
        for op, self_us, category in _self_times(thread_ops):
            phase = cpu_phases.phase_at(op.pid, op.tid, op.start_us)
            out.add(phase, category, self_us, op.name)


def _self_times(ops: Sequence[Span]) -> list[tuple[Span, float, str]]:
    """Each operator of one thread with its self time and category (an attention's or a
    collective's callees take its category)."""
    result: list[tuple[Span, float, str]] = []
    stack: list[tuple[Span, int]] = []  # open operators and their index in `result`
    for op in sorted(ops, key=lambda s: (s.start_us, -s.dur_us)):
        while stack and stack[-1][0].end_us <= op.start_us:
            stack.pop()
        parent_category = next(
            (c for c in (inherited(s.name) for s, _ in reversed(stack)) if c), None
        )
        if stack:  # the parent's self time loses this call
            parent, index = stack[-1]
            span, self_us, category = result[index]
            result[index] = (span, self_us - min(op.dur_us, parent.end_us - op.start_us), category)
        result.append((op, op.dur_us, parent_category or categorize(op.name)))
        stack.append((op, len(result) - 1))
    return result


@dataclass(frozen=True)
class ProfileResult:
    """A profile of one server: its trace, the work per phase, and the profiler's cost."""

    scenario: str
    mode: str
    command: str
    server_info: dict[str, Any]
    trace_path: Path  # as the server wrote it
    window: dict[str, Any]  # the server's window file; empty where the engine writes none
    breakdown: Breakdown
    tok_s: tuple[float, ...]  # the unprofiled repeats
    cycle_ms_outside: tuple[float, ...]  # the same cycles of the unprofiled repeats
    cycle_ms_inside: tuple[float, ...]  # the profiled cycles, as the probe timed them
    # Per phase, the probe's median ms over the cycles compared with (unprofiled): each
    # phase's window, beside the trace's work inside it.
    phase_ms_outside: dict[str, float] = field(default_factory=dict)

    @property
    def overhead(self) -> float | None:
        """The profiled cycles' median time over the unprofiled ones', minus 1."""
        if not self.cycle_ms_inside or not self.cycle_ms_outside:
            return None
        inside = statistics.median(self.cycle_ms_inside)
        return inside / statistics.median(self.cycle_ms_outside) - 1.0
