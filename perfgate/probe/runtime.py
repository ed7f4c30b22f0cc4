"""The probe inside a server process: times the methods of a target table, per decode cycle.

Activated by `PERFGATE_PROBE_DIR` (see `perfgate.probe.boot`), with the table, the engine's
release and the server's mode in `PERFGATE_PROBE_TABLE`, `PERFGATE_PROBE_ENGINE_VERSION` and
`PERFGATE_PROBE_MODE`. Each wrapped method takes a mark on entry and exit:
`time.perf_counter()` on CPU, a CUDA event recorded on the current stream on GPU. Nothing in
the hot path synchronises the device: finished events are found with non-blocking queries,
and a writer thread appends one JSON line per cycle to `$PERFGATE_PROBE_DIR/probe-<pid>.jsonl`
(one file per process, so per TP rank; each record names its ``rank`` in torch.distributed's
group, 0 in a process outside one), followed by a `flushed` heartbeat that tells readers
how far the file is complete. Nothing starts, and no file appears, until a wrapped method
runs.

Events are queried on the thread that recorded them, at the end of each cycle, as SGLang's own
`DeviceTimer` does: a query from another thread while a CUDA graph is being captured in
global mode invalidates the capture (seen on an H200, torch 2.11: `cudaErrorStreamCapture
Unsupported` in the querying thread, `cudaErrorStreamCaptureInvalidated` in the capturing one).
Only once the process has been quiet for a while does the writer thread resolve what is left
(the last cycles before the server idles); SGLang captures its graphs before it serves, when
there is nothing to resolve.

What the probe costs is measured (``benchmarks/probe_cost.py`` per cycle,
``benchmarks/probe_overhead.py`` in tok/s), not assumed. On an H200 a CUDA event's record
took 7.4 us of CPU, 4.3 of them looking up the current stream; a timed cycle shaped like the
embedded engine's (ten marks) cost 158 us. So the stream is kept until the current one
changes (a mark costs 2.1 us), events come from a pool, a record is resolved with one query
while its last mark is not done, and on a GPU the probe times one decode cycle in
`PERFGATE_PROBE_EVERY` (default 4; 1 on the CPU clock): 22.6 us per cycle on average, at
most 0.43% of a 5.2 ms cycle. The cycles in between run unwrapped but for a counter. Every
cycle record carries the stride as ``every``, so sums over cycles scale back to all of them;
medians need no scaling. A profile times every cycle (`perfgate profile` sets the stride
to 1).

A phase whose target names its accepted drafts (`AcceptedDrafts`, the `accept` phase of a
speculative table) also gives the cycle's record what each sequence accepted: ``accepted``,
the draft tokens each sequence of the batch accepted (bonus excluded), and ``rows``, which
sequence each count belongs to. The values are taken as the method returns: a host value as
it is; a CUDA tensor as a copy to the host queued on the current stream without waiting, read
once the cycle's last mark is done (the copy was queued before it). A value that cannot be
read leaves both out of the record; the server never fails for it.

For a profiler, the probe can also mark each timed call as a range named after its phase
(``draft``, ``verify``, ``cycle``...): a ``torch.profiler.record_function`` range, and an
NVTX range on CUDA (for Nsight Systems). The embedded server turns that on for the length
of a profile (``set_phase_ranges``); ``PERFGATE_PROBE_RANGES=1`` turns it on for the whole
life of a server whose profiler perfgate does not drive (SGLang's own ``/start_profile``).
Off, the hot path pays one global lookup per call.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from perfgate import metrics
from perfgate.probe import DIR_VARIABLE, RANGES_VARIABLE
from perfgate.probe.targets import AcceptedDrafts, ProbeTarget, select_targets
from perfgate.spec.probe import EVERY_VARIABLE, parse_every

TABLE_VARIABLE = "PERFGATE_PROBE_TABLE"
VERSION_VARIABLE = "PERFGATE_PROBE_ENGINE_VERSION"
MODE_VARIABLE = "PERFGATE_PROBE_MODE"
FLUSH_INTERVAL_S = 0.05
HEARTBEAT_INTERVAL_S = 1.0  # an idle process still says, this often, that its file is complete
QUIET_S = 0.2  # after this long without a cycle, the writer thread resolves what is left
FRAMES = (metrics.CYCLE, metrics.PREFILL)
DEFAULT_EVERY = {"cpu": 1, "cuda": 4}  # the stride of timed decode cycles, per clock


class _CpuClock:
    name = "cpu"

    def capturing(self) -> bool:
        return False

    def mark(self) -> float:
        return time.perf_counter()

    def ready(self, mark: Any) -> bool:
        return True

    def release(self, marks: Sequence[Any]) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end - start) * 1e3


class _CudaClock:
    name = "cuda"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._capturing = torch.cuda.is_current_stream_capturing
        self._current_stream = torch.cuda.current_stream
        self._free: deque[Any] = deque()  # events whose times have been read, for reuse
        # `Event.record()` looks the current stream up as a new Python object, 4.5 of its
        # 7.5 us on an H200: the stream is kept and looked up again only when the raw handle
        # of the current stream changes (torch's private, C-level getters; without them,
        # the plain lookup).
        getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        device = getattr(torch._C, "_cuda_getDevice", None)
        self._raw_stream: Callable[[], int] | None = (
            (lambda: getter(device())) if getter is not None and device is not None else None
        )
        self._raw = -1
        self._stream: Any = None

    def capturing(self) -> bool:
        # A method run while a CUDA graph is captured is not a real cycle; recording an
        # event into the graph would be wrong as well.
        return bool(self._capturing())

    def mark(self) -> Any:
        try:
            event = self._free.pop()
        except IndexError:
            event = self._event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record(self._stream_now())  # on the current stream; no synchronisation
        return event

    def _stream_now(self) -> Any:
        if self._raw_stream is None:
            return self._current_stream()
        raw = self._raw_stream()
        if raw != self._raw:
            self._stream, self._raw = self._current_stream(), raw
        return self._stream

    def release(self, marks: Sequence[Any]) -> None:
        self._free.extend(marks)

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))


def _pick_clock() -> _CpuClock | _CudaClock:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return _CudaClock()
    return _CpuClock()


def _process_rank() -> int:
    """This process's rank in torch.distributed's default group; 0 outside one.

    A tensor-parallel server's ranks (SGLang's, the embedded engine's) join the group before
    their first forward, so it is known by the first timed call.
    """
    torch = sys.modules.get("torch")
    try:
        distributed = torch.distributed if torch is not None else None
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return int(distributed.get_rank())
    except Exception:
        pass  # an unusual build of torch: the record says rank 0
    return 0


Span = tuple[Any, Any]


class _Frame:
    """One decode cycle (or prefill) being timed: its own span and its phases' spans."""

    __slots__ = ("accepted", "end", "kind", "nested", "spans", "stack", "start", "wall")

    def __init__(self, kind: str, start: Any, wall: float) -> None:
        self.accepted: _Accepted | None = None  # what each sequence accepted, as taken
        self.kind = kind
        self.start = start
        self.end: Any = None  # the frame's closing mark, the last one it records
        self.wall = wall
        self.spans: dict[str, list[Span]] = {}
        self.nested: dict[str, list[Span]] = {}  # phase -> spans of phases run inside it
        self.stack: list[str] = []  # the phases open right now, innermost last


class Probe:
    """Collects the spans of one process and writes them, cycle by cycle."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / f"probe-{os.getpid()}.jsonl"
        self._clock: _CpuClock | _CudaClock | None = None
        self._local = threading.local()  # the frame being timed, per thread
        self._pending: deque[dict[str, Any]] = deque()  # records whose marks may not be done
        self._ready: deque[dict[str, Any]] = deque()  # resolved records, to be written
        self._seq = 0
        self._every = 1  # the stride of timed decode cycles, set with the clock
        self._rank = 0  # this process's rank in torch.distributed's group, set with the clock
        self._cycles_seen = 0
        self._last_frame_end = 0.0
        self._last_heartbeat = 0.0
        self._resolve_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._start_writer()
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._after_fork)

    def _start_writer(self) -> None:
        writer = threading.Thread(target=self._write_loop, name="perfgate-probe", daemon=True)
        writer.start()

    def _after_fork(self) -> None:
        # A forked child has no writer thread and a new pid: give it its own file and thread.
        self.path = self.path.with_name(f"probe-{os.getpid()}.jsonl")
        self._pending.clear()
        self._ready.clear()
        self._local = threading.local()
        self._resolve_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._start_writer()

    # --- hot path -----------------------------------------------------------------------
    def call(
        self,
        method: Callable[..., Any],
        role: str,
        args: Any,
        kwargs: Any,
        accepted: AcceptedDrafts | None = None,
    ) -> Any:
        """Run `method` timed as `role` (a phase, `cycle` or `prefill`); where `accepted` says
        how, keep what its result tells of each sequence's accepted drafts.

        The cheap questions come first: most calls on a GPU are in cycles the stride skips,
        and pay for little more than the lookups that say so.
        """
        clock = self._clock or self._first_clock()
        if _ranges is not None:  # a profiler is recording: mark the call as a named range
            method = functools.partial(_ranges.run, role, method)
        frame = getattr(self._local, "frame", None)
        if role in FRAMES:
            if frame is not None or self._skip(role) or clock.capturing():
                # A frame inside a frame belongs to the outer one; a skipped cycle and one run
                # while a CUDA graph is captured (not a real cycle) are not timed.
                return method(*args, **kwargs)
            return self._run_frame(role, clock, method, args, kwargs)
        if frame is None or frame.kind != metrics.CYCLE:
            return method(*args, **kwargs)  # outside a timed decode cycle
        # A cycle that began outside a CUDA graph capture is a real one: its phases are not
        # asked again (on an H200 each question is a CUDA call of a few microseconds).
        return self._run_phase(frame, role, clock, method, args, kwargs, accepted)

    def _skip(self, kind: str) -> bool:
        """Whether the stride leaves this decode cycle untimed (never while ranges are on)."""
        if kind != metrics.CYCLE or self._every == 1 or _ranges is not None:
            return False
        self._cycles_seen += 1
        return self._cycles_seen % self._every != 0

    def _first_clock(self) -> _CpuClock | _CudaClock:
        clock = _pick_clock()
        self._every = _every if _every is not None else DEFAULT_EVERY[clock.name]
        self._rank = _process_rank()
        self._clock = clock
        return clock

    def _run_frame(self, kind: str, clock: Any, method: Any, args: Any, kwargs: Any) -> Any:
        frame = _Frame(kind, clock.mark(), time.time())
        self._local.frame = frame
        try:
            return method(*args, **kwargs)
        finally:
            frame.end = clock.mark()
            self._local.frame = None
            self._finish(frame)

    def _run_phase(
        self,
        frame: _Frame,
        phase: str,
        clock: Any,
        method: Any,
        args: Any,
        kwargs: Any,
        accepted: AcceptedDrafts | None = None,
    ) -> Any:
        frame.stack.append(phase)
        start = clock.mark()
        try:
            result = method(*args, **kwargs)
            if accepted is not None:
                frame.accepted = take_accepted(accepted, result, args)
            return result
        finally:
            span = (start, clock.mark())
            frame.stack.pop()
            frame.spans.setdefault(phase, []).append(span)
            if frame.stack:
                frame.nested.setdefault(frame.stack[-1], []).append(span)

    def _finish(self, frame: _Frame) -> None:
        self._seq += 1
        frame.spans[frame.kind] = [(frame.start, frame.end)]
        every = self._every if frame.kind == metrics.CYCLE and _ranges is None else 1
        record = {"kind": frame.kind, "seq": self._seq, "t": frame.wall, "every": every}
        self._pending.append(
            {
                **record,
                "spans": frame.spans,
                "nested": frame.nested,
                "last": frame.end,
                "accepted": frame.accepted,
            }
        )
        self._last_frame_end = time.monotonic()
        self._resolve_ready()

    # --- resolving marks: non-blocking, normally on the thread that recorded them -----------
    def _resolve_ready(self) -> None:
        if not self._resolve_lock.acquire(blocking=False):
            return  # the writer is resolving right now
        try:
            while self._pending and self._resolved(self._pending[0]):
                self._ready.append(self._resolve(self._pending.popleft()))
        finally:
            self._resolve_lock.release()

    def _resolved(self, record: dict[str, Any]) -> bool:
        # The frame's last mark first: while it is not done (the usual answer for the cycle
        # just ended) one query settles it. Once it is, the others are checked too, since a
        # phase may have recorded on another stream.
        assert self._clock is not None
        ready = self._clock.ready
        if not ready(record["last"]):
            return False
        return all(ready(end) for spans in record["spans"].values() for _, end in spans)

    def _resolve(self, record: dict[str, Any]) -> dict[str, Any]:
        assert self._clock is not None
        total = self._clock.elapsed_ms
        phases_ms = {
            phase: sum(total(s, e) for s, e in spans)
            - sum(total(s, e) for s, e in record["nested"].get(phase, ()))
            for phase, spans in record["spans"].items()
        }
        self._clock.release(
            [mark for spans in record["spans"].values() for span in spans for mark in span]
        )
        resolved = {
            "kind": record["kind"],
            "pid": os.getpid(),
            "rank": self._rank,
            "seq": record["seq"],
            "t": record["t"],
            "every": record["every"],
            "clock": self._clock.name,
            "ms": phases_ms,
        }
        if record["accepted"] is not None:
            resolved.update(record["accepted"].resolve())
        return resolved

    # --- off the critical path ----------------------------------------------------------
    def _write_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()

    def flush(self, *, final: bool = False) -> None:
        """Write every resolved record, then a `flushed` heartbeat."""
        if final or time.monotonic() - self._last_frame_end >= QUIET_S:
            self._resolve_ready()
        with self._write_lock:
            now = time.time()
            lines = []
            while self._ready:
                lines.append(json.dumps(self._ready.popleft()))
            if not lines and now - self._last_heartbeat < HEARTBEAT_INTERVAL_S and not final:
                return
            self._last_heartbeat = now
            lines.append(json.dumps({"kind": "flushed", "t": now, "pending": len(self._pending)}))
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.flush(final=True)


# --- accepted drafts -------------------------------------------------------------------
class _Accepted:
    """What an accept method's result said of each sequence, kept until its cycle resolves."""

    __slots__ = ("bonus", "counts", "rows")

    def __init__(self, counts: Any, rows: Any, bonus: int) -> None:
        self.counts, self.rows, self.bonus = counts, rows, bonus

    def resolve(self) -> dict[str, list[int]]:
        """``accepted`` (drafts per sequence, bonus excluded) and ``rows``; empty when the
        values cannot be read or do not pair up."""
        try:
            counts, rows = _host_ints(self.counts), _host_ints(self.rows)
        except Exception:
            return {}
        if counts is None or rows is None or len(counts) != len(rows):
            return {}
        return {"accepted": [c - self.bonus for c in counts], "rows": rows}


def take_accepted(where: AcceptedDrafts, result: Any, args: Sequence[Any]) -> _Accepted | None:
    """Take the values `where` names from a method's `result` and `args` (self first), a
    CUDA tensor as a host copy queued without waiting; None if one is missing."""
    try:
        counts = _to_host(_first(where.counts, result, args))
        rows = _to_host(_first(where.rows, result, args))
    except Exception:
        return None
    if counts is None or rows is None:
        return None
    return _Accepted(counts, rows, where.bonus)


def _first(paths: Sequence[str], result: Any, args: Sequence[Any]) -> Any:
    """The value of the first path that leads to one (not None); None if none does."""
    for path in paths:
        try:
            value = _follow(path, result, args)
        except Exception:
            continue
        if value is not None:
            return value
    return None


def _follow(path: str, result: Any, args: Sequence[Any]) -> Any:
    root, *names = path.split(".")
    value = result if root == "result" else args[1]
    for name in names:
        value = value[int(name)] if name.isdigit() else getattr(value, name)
    return value


def _to_host(value: Any) -> Any:
    if getattr(value, "is_cuda", False):
        return value.to("cpu", non_blocking=True)  # queued on the current stream
    return value


def _host_ints(value: Any) -> list[int] | None:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list | tuple):
        return None
    return [int(v) for v in value]


# --- phase ranges, for profilers -------------------------------------------------------
class PhaseRanges:
    """Runs a call inside a range named after its phase: torch.profiler's, and NVTX's on CUDA.

    torch is looked up at the first call, not before: the variable that turns ranges on is
    read at interpreter start-up, before the server has imported torch or set up CUDA.
    """

    def __init__(self) -> None:
        self._record_function: Any = None
        self._nvtx: Any = None

    def run(self, role: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._record_function is None:
            self._bind_torch()
        if self._nvtx is not None:
            self._nvtx.range_push(role)
        try:
            with self._record_function(role):
                return method(*args, **kwargs)
        finally:
            if self._nvtx is not None:
                self._nvtx.range_pop()

    def _bind_torch(self) -> None:
        import torch

        self._record_function = torch.profiler.record_function
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            self._nvtx = torch.cuda.nvtx


_ranges: PhaseRanges | None = None


def set_phase_ranges(on: bool) -> None:
    """Mark every timed call as a range named after its phase (on), or stop marking (off).

    Only calls the probe times are marked: in a process without an active probe this does
    nothing visible.
    """
    global _ranges
    _ranges = PhaseRanges() if on else None


def phase_ranges_on() -> bool:
    """Whether timed calls are marked as phase ranges right now."""
    return _ranges is not None


# --- installing the probe --------------------------------------------------------------
_out_dir: Path | None = None
_every: int | None = None  # PERFGATE_PROBE_EVERY, read at activation
_probe: Probe | None = None
_probe_lock = threading.Lock()


def current_probe() -> Probe:
    """Return this process's probe, created (with its writer thread) on first use."""
    global _probe
    if _probe is None:
        with _probe_lock:
            if _probe is None:
                if _out_dir is None:
                    raise RuntimeError(f"the probe is not active: {DIR_VARIABLE} is not set")
                _probe = Probe(_out_dir)
    return _probe


def _is_decode(path: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    # The method's first argument after `self`, then attributes; a callable is called.
    value: Any = args[1] if len(args) > 1 else next(iter(kwargs.values()), None)
    try:
        for name in path.split("."):
            value = getattr(value, name)
        return bool(value() if callable(value) else value)
    except Exception:
        return False  # an unrecognised batch is not a decode cycle


def timed(method: Callable[..., Any], target: ProbeTarget) -> Callable[..., Any]:
    """Return `method` timed as `target.phase` by this process's probe."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        role = target.phase
        if target.decode_if and not _is_decode(target.decode_if, args, kwargs):
            role = metrics.PREFILL
        return current_probe().call(method, role, args, kwargs, target.accepted)

    wrapper.__perfgate_probe__ = target.phase  # type: ignore[attr-defined]
    return wrapper


def patch_class(module: ModuleType, targets: Sequence[ProbeTarget]) -> list[str]:
    """Wrap the targets' methods found in `module`; return what was wrapped."""
    wrapped = []
    for target in targets:
        if target.module != module.__name__:
            continue
        owner = getattr(module, target.qualname, None)
        method = owner.__dict__.get(target.method) if isinstance(owner, type) else None
        if method is None or hasattr(method, "__perfgate_probe__"):
            continue
        setattr(owner, target.method, timed(method, target))
        wrapped.append(f"{target.module}.{target.qualname}.{target.method}")
    return wrapped


def unpatch_class(module: ModuleType, targets: Sequence[ProbeTarget]) -> list[str]:
    """Put back the methods `patch_class` wrapped in `module`; return what was unwrapped.

    For measuring the probe against itself in one process (``benchmarks/probe_*.py``).
    """
    unwrapped = []
    for target in targets:
        owner = getattr(module, target.qualname, None) if target.module == module.__name__ else None
        method = owner.__dict__.get(target.method) if isinstance(owner, type) else None
        if method is not None and hasattr(method, "__perfgate_probe__"):
            setattr(owner, target.method, method.__wrapped__)
            unwrapped.append(f"{target.module}.{target.qualname}.{target.method}")
    return unwrapped


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a target module right after it is first imported."""

    def __init__(self, targets: Sequence[ProbeTarget]) -> None:
        self._by_module: dict[str, list[ProbeTarget]] = {}
        for target in targets:
            self._by_module.setdefault(target.module, []).append(target)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self._by_module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        original_exec = spec.loader.exec_module
        targets = self._by_module[fullname]

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            patch_class(module, targets)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def activate(environ: Mapping[str, str] | None = None) -> bool:
    """Install the probe's import hook if `PERFGATE_PROBE_DIR` is set; return whether it is.

    Idempotent. Nothing is timed, and no thread starts, until a wrapped method runs.
    """
    global _out_dir, _every
    env = os.environ if environ is None else environ
    if _out_dir is not None:
        return True
    if not env.get(DIR_VARIABLE):
        return False
    _every = parse_every(env.get(EVERY_VARIABLE))
    table = select_targets(
        env.get(TABLE_VARIABLE, "embedded"), env.get(VERSION_VARIABLE), env.get(MODE_VARIABLE)
    )
    _out_dir = Path(env[DIR_VARIABLE])
    _out_dir.mkdir(parents=True, exist_ok=True)
    if env.get(RANGES_VARIABLE) == "1":
        set_phase_ranges(True)
    for module_name in {t.module for t in table}:
        if module_name in sys.modules:
            patch_class(sys.modules[module_name], table)
    sys.meta_path.insert(0, _PatchOnImport(table))
    return True
