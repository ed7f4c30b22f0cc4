"""Profile a few decode cycles with torch.profiler, asked for the way SGLang asks for it.

``POST /start_profile`` takes SGLang's request body (``ProfileReqInput``): ``output_dir``
(default ``$SGLANG_TORCH_PROFILER_DIR``, else ``/tmp``), ``num_steps``, ``activities``
(``CPU`` and ``GPU``, the default), ``with_stack``, ``record_shapes``, ``profile_prefix``,
``merge_profiles`` (one rank: nothing to merge). ``start_step``, ``profile_by_stage`` and the
``MEM`` and ``RPD`` activities are refused with HTTP 400; other keys are ignored, as SGLang
ignores them.

A step is one decode cycle (a speculative cycle, or a plain decode step); prefills are not
counted. The profiler starts on the worker's thread before the first decode cycle after
the request (torch.profiler records the ops of the thread that starts it), and stops after
``num_steps`` cycles, on ``POST /stop_profile``, or when the ``/generate`` request it started
in finishes, whichever comes first: a profile never spans two requests. It then writes
``<prefix>-<id>-TP-0.trace.json`` (Chrome trace format, which Perfetto opens) to the output
directory, with ``<prefix>-<id>.window.json`` beside it: the wall-clock window the profiler
ran in and the cycles it saw, so a client can tell the profiled cycles from the others in
the probe's records. While the profiler runs, the probe (if active) marks each phase as a
``record_function`` range named after it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from perfgate.engines.embedded.batch import RequestError
from perfgate.probe import runtime as probe_runtime

ACTIVITIES = ("CPU", "GPU")
REFUSED_ACTIVITIES = ("MEM", "RPD")
DIR_VARIABLE = "SGLANG_TORCH_PROFILER_DIR"  # SGLang's default output directory
DEFAULT_PREFIX = "perfgate-embedded"
STOPPING = "Stop profiling. This will take some time.\n"  # SGLang's reply


@dataclass(frozen=True)
class ProfileRequest:
    """What /start_profile asked for."""

    output_dir: Path
    num_steps: int | None
    activities: tuple[str, ...]
    with_stack: bool
    record_shapes: bool
    prefix: str


def parse_profile_request(body: Any, environ: Mapping[str, str] | None = None) -> ProfileRequest:
    """Validate a /start_profile body; a RequestError names the field that is wrong."""
    env = os.environ if environ is None else environ
    body = {} if body is None else body
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    for key in ("start_step", "profile_by_stage"):
        if body.get(key):
            raise RequestError(
                f"{key!r} is not supported by the embedded engine: a profile starts at the "
                "next decode cycle and covers decode cycles only"
            )
    num_steps = body.get("num_steps")
    if num_steps is not None and (
        not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 1
    ):
        raise RequestError(f"num_steps must be an int >= 1, got {num_steps!r}")
    output_dir = body.get("output_dir") or env.get(DIR_VARIABLE) or "/tmp"
    prefix = body.get("profile_prefix") or DEFAULT_PREFIX
    if not isinstance(output_dir, str) or not isinstance(prefix, str) or "/" in prefix:
        raise RequestError("output_dir must be a path and profile_prefix a name without '/'")
    return ProfileRequest(
        output_dir=Path(output_dir),
        num_steps=num_steps,
        activities=_activities(body.get("activities")),
        with_stack=bool(body.get("with_stack")),
        record_shapes=bool(body.get("record_shapes")),
        prefix=prefix,
    )


def _activities(value: Any) -> tuple[str, ...]:
    if value is None:
        return ACTIVITIES
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RequestError(f"activities must be a non-empty list of names, got {value!r}")
    for name in value:
        if name in REFUSED_ACTIVITIES:
            raise RequestError(f"activity {name!r} is not supported by the embedded engine")
        if name not in ACTIVITIES:
            raise RequestError(f"unknown activity {name!r}: use {', '.join(ACTIVITIES)}")
    return tuple(dict.fromkeys(value))


class StepProfiler:
    """The profiler of one server: idle, pending (asked for), or running on the worker.

    ``start`` and ``stop`` come from HTTP threads; ``before_cycle`` and ``after_request`` run
    on the worker's thread, under the engine's lock. ``set_hook`` installs or removes the
    worker's per-cycle hook, so that no cycle pays anything while nothing is asked for.
    """

    def __init__(self, device: torch.device, set_hook: Callable[[Callable[[], None] | None], None]):
        self.device = device
        self._set_hook = set_hook
        self._lock = threading.Lock()
        self._pending: ProfileRequest | None = None
        self._running: _Window | None = None
        self._stop_asked = False

    @property
    def busy(self) -> bool:
        return self._pending is not None or self._running is not None

    def start(self, request: ProfileRequest) -> str:
        """Ask for a profile from the next decode cycle on."""
        with self._lock:
            if self.busy:
                raise RequestError("a profile is already pending or running; stop it first")
            request.output_dir.mkdir(parents=True, exist_ok=True)
            self._pending, self._stop_asked = request, False
            self._set_hook(self.before_cycle)
        return "Start profiling.\n"

    def stop(self) -> str:
        """End the profile at the next cycle boundary, or drop one that never started."""
        with self._lock:
            if self._running is not None:
                self._stop_asked = True
                return STOPPING
            if self._pending is not None:
                self._pending = None
                self._set_hook(None)
                return "Profiling cancelled: no decode cycle ran since /start_profile.\n"
        raise RequestError("Profiling is not in progress. Call /start_profile first.")

    def before_cycle(self) -> None:
        """Start, count or end the profile; called before each decode cycle."""
        with self._lock:
            running = self._running
            if running is not None and (self._stop_asked or running.full()):
                self._finish()
            elif running is None and self._pending is not None:
                self._running = _Window.open(self._pending, self.device)
                self._pending = None
            if self._running is not None:
                self._running.cycles += 1

    def after_request(self) -> None:
        """End a running profile: its request is done."""
        with self._lock:
            if self._running is not None:
                self._finish()

    def _finish(self) -> None:
        assert self._running is not None
        self._running.close()
        self._running = None
        self._set_hook(None)


class _Window:
    """A running torch.profiler, and what the window file will say about it."""

    def __init__(self, request: ProfileRequest, profiler: Any, activities: tuple[str, ...]):
        self.request = request
        self.profiler = profiler
        self.activities = activities
        self.started_at = time.time()
        self.cycles = 0
        self.profile_id = f"{self.started_at:.6f}"

    @classmethod
    def open(cls, request: ProfileRequest, device: torch.device) -> _Window:
        # On a CPU server the device's work is the CPU's operators: "GPU" profiles those.
        on_gpu = device.type == "cuda"
        activities = tuple(dict.fromkeys(a if on_gpu else "CPU" for a in request.activities))
        kinds = {"CPU": torch.profiler.ProfilerActivity.CPU}
        if device.type == "cuda":
            kinds["GPU"] = torch.profiler.ProfilerActivity.CUDA
        profiler = torch.profiler.profile(
            activities=[kinds[a] for a in activities],
            record_shapes=request.record_shapes,
            with_stack=request.with_stack,
        )
        profiler.start()
        probe_runtime.set_phase_ranges(True)
        return cls(request, profiler, activities)

    def full(self) -> bool:
        return self.request.num_steps is not None and self.cycles >= self.request.num_steps

    def close(self) -> None:
        """Stop the profiler and write the trace and the window file."""
        probe_runtime.set_phase_ranges(False)
        stopped_at = time.time()
        self.profiler.stop()
        stem = f"{self.request.prefix}-{self.profile_id}"
        trace = self.request.output_dir / f"{stem}-TP-0.trace.json"
        self.profiler.export_chrome_trace(str(trace))
        window = {
            "trace": trace.name,
            "started_at": self.started_at,
            "stopped_at": stopped_at,
            "cycles": self.cycles,
            "activities": list(self.activities),
        }
        (self.request.output_dir / f"{stem}.window.json").write_text(json.dumps(window) + "\n")
