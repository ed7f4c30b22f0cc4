"""The probe inside a server process: times the methods of a target table, per decode cycle.

Activated by `PERFGATE_PROBE_DIR` (see `perfgate.probe.boot`). Each wrapped method takes a
mark on entry and exit: `time.perf_counter()` on CPU, a CUDA event recorded on the current
stream on GPU. The hot path never synchronises the device; a writer thread resolves finished
events off the critical path and appends one JSON line per cycle to
`$PERFGATE_PROBE_DIR/probe-<pid>.jsonl`, followed by a `flushed` heartbeat that tells readers
how far the file is complete.
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
from perfgate.probe.targets import TARGET_TABLES, ProbeTarget

DIR_VARIABLE = "PERFGATE_PROBE_DIR"
TABLE_VARIABLE = "PERFGATE_PROBE_TABLE"
FLUSH_INTERVAL_S = 0.05
HEARTBEAT_INTERVAL_S = 1.0  # an idle process still says, this often, that its file is complete


class _CpuClock:
    name = "cpu"

    def mark(self) -> float:
        return time.perf_counter()

    def ready(self, mark: Any) -> bool:
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end - start) * 1e3


class _CudaClock:
    name = "cuda"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._device = torch.cuda.current_device()

    def mark(self) -> Any:
        event = self._event(enable_timing=True)
        event.record()  # on the current stream; no synchronisation
        return event

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))


def _pick_clock() -> _CpuClock | _CudaClock:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return _CudaClock()
    return _CpuClock()


Span = tuple[Any, Any]


class Probe:
    """Collects the spans of one process and writes them, cycle by cycle."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / f"probe-{os.getpid()}.jsonl"
        self._clock: _CpuClock | _CudaClock | None = None
        self._depth = 0  # >0 while inside a `cycle` method
        self._current: dict[str, list[Span]] = {}
        self._pending: deque[dict[str, Any]] = deque()
        self._seq = 0
        self._last_heartbeat = 0.0
        self._lock = threading.Lock()
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
        self._current = {}
        self._lock = threading.Lock()
        self._start_writer()

    # --- hot path -----------------------------------------------------------------------
    def wrap(self, method: Callable[..., Any], phase: str) -> Callable[..., Any]:
        """Return `method` timed as `phase`."""

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            clock = self._clock or self._first_clock()
            if phase == metrics.CYCLE:
                self._depth += 1
            start = clock.mark()
            start_wall = time.time()
            try:
                return method(*args, **kwargs)
            finally:
                self._on_exit(phase, (start, clock.mark()), start_wall)

        timed.__perfgate_probe__ = phase  # type: ignore[attr-defined]
        return timed

    def _first_clock(self) -> _CpuClock | _CudaClock:
        self._clock = _pick_clock()
        return self._clock

    def _on_exit(self, phase: str, span: Span, start_wall: float) -> None:
        if phase == metrics.CYCLE:
            self._depth -= 1
            spans, self._current = self._current, {}
            spans[metrics.CYCLE] = [span]
            self._enqueue("cycle", start_wall, spans)
        elif phase == metrics.PREFILL:
            self._enqueue("prefill", start_wall, {metrics.PREFILL: [span]})
        elif self._depth > 0:
            self._current.setdefault(phase, []).append(span)
        # A phase method called outside any cycle (inside prefill, say) is part of prefill.

    def _enqueue(self, kind: str, start_wall: float, spans: dict[str, list[Span]]) -> None:
        self._seq += 1
        self._pending.append({"kind": kind, "seq": self._seq, "t": start_wall, "spans": spans})

    # --- off the critical path ----------------------------------------------------------
    def _write_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        """Write every record whose marks have resolved, then a `flushed` heartbeat."""
        with self._lock:
            now = time.time()
            lines = []
            while self._pending and self._resolved(self._pending[0]):
                lines.append(json.dumps(self._resolve(self._pending.popleft())))
            if not lines and now - self._last_heartbeat < HEARTBEAT_INTERVAL_S:
                return
            self._last_heartbeat = now
            lines.append(json.dumps({"kind": "flushed", "t": now, "pending": len(self._pending)}))
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")

    def _resolved(self, record: dict[str, Any]) -> bool:
        assert self._clock is not None
        return all(self._clock.ready(end) for spans in record["spans"].values() for _, end in spans)

    def _resolve(self, record: dict[str, Any]) -> dict[str, Any]:
        assert self._clock is not None
        phases_ms = {
            phase: sum(self._clock.elapsed_ms(start, end) for start, end in spans)
            for phase, spans in record["spans"].items()
        }
        return {
            "kind": record["kind"],
            "pid": os.getpid(),
            "seq": record["seq"],
            "t": record["t"],
            "clock": self._clock.name,
            "ms": phases_ms,
        }

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.flush()


# --- installing the probe --------------------------------------------------------------
_out_dir: Path | None = None
_probe: Probe | None = None


def current_probe() -> Probe:
    """Return this process's probe, created (with its writer thread) on first use."""
    global _probe
    if _probe is None:
        if _out_dir is None:
            raise RuntimeError(f"the probe is not active: {DIR_VARIABLE} is not set")
        _probe = Probe(_out_dir)
    return _probe


def patch_class(module: ModuleType, targets: Sequence[ProbeTarget]) -> list[str]:
    """Wrap the targets' methods found in `module`; return what was wrapped."""
    wrapped = []
    for target in targets:
        owner = getattr(module, target.qualname, None)
        method = getattr(owner, target.method, None) if owner is not None else None
        if method is None or hasattr(method, "__perfgate_probe__"):
            continue
        setattr(owner, target.method, current_probe().wrap(method, target.phase))
        wrapped.append(f"{target.module}.{target.qualname}.{target.method}")
    return wrapped


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

    Idempotent. Nothing is timed, and no thread starts, until a target module is imported.
    """
    global _out_dir
    env = os.environ if environ is None else environ
    if _out_dir is not None:
        return True
    if not env.get(DIR_VARIABLE):
        return False
    table_name = env.get(TABLE_VARIABLE, "embedded")
    if table_name not in TARGET_TABLES:
        raise LookupError(
            f"no probe target table for {table_name!r}; perfgate knows {', '.join(TARGET_TABLES)}"
        )
    table = TARGET_TABLES[table_name]
    _out_dir = Path(env[DIR_VARIABLE])
    _out_dir.mkdir(parents=True, exist_ok=True)
    for module_name in {t.module for t in table}:
        if module_name in sys.modules:
            patch_class(sys.modules[module_name], table)
    sys.meta_path.insert(0, _PatchOnImport(table))
    return True
