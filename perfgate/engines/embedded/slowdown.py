"""Phases made longer by a stated fraction of their own time, to validate the gate.

``--debug-slow-phase verify=0.02`` (perfgate.spec.slowdown) makes every verify pass 2% longer:
after the phase's own work, still inside its method (so the probe charges it to the phase),
the worker waits for ``fraction`` times what the phase took.

- On a CPU the phase's time is known as it ends (``perf_counter``), so each call waits for
  exactly its share: a sleep for all but the last millisecond, then a spin to the deadline.
- On CUDA the phase's work is queued, not done, when its method returns. Its time is read
  from CUDA events recorded around the work (never waited for: an event pair is read once
  the GPU has passed it, which the next cycle's one sync guarantees), and the wait is a GPU
  busy-wait of ``fraction`` times the median of the phase's last timed calls
  (``torch.cuda._sleep``, its clock cycles per millisecond calibrated at start), queued on
  the current stream after the phase's kernels. The first call of a phase has no time yet
  and is not slowed; the server's warm-up request times every phase before any repeat.

The fraction is of the phase's time with any slowdown inside it: ``cycle`` slowed together
with ``verify`` waits for its share of a cycle whose verify is slowed already. A phase that
runs another inside it (accept queues the draft extend) marks that block ``aside``: its time
is the inner phase's, as the probe counts it, not the outer one's.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

# The median of this many of a phase's last timed calls sizes its wait on CUDA: a call that
# captured a graph or compiled a shape is one of many.
TIMED_CALLS = 16
SPIN_S = 0.001  # on a CPU, the last part of a wait is spun, so a sleep's lateness stays out
_UNSLOWED: AbstractContextManager[None] = nullcontext()


class PhaseSlowdown:
    """Makes the phases named in ``fractions`` longer by that fraction of their own time."""

    def __init__(self, fractions: Mapping[str, float], device: torch.device) -> None:
        self.fractions = dict(fractions)
        self.cuda = device.type == "cuda" and bool(self.fractions)
        self.cycles_per_ms = cuda_sleep_cycles_per_ms(device) if self.cuda else 0.0
        # Per phase, its calls whose events the GPU has not passed yet: each call's segments,
        # (start, end) event pairs, one more for each block set aside inside it.
        self._pending: dict[str, deque[list[tuple[torch.cuda.Event, torch.cuda.Event]]]] = {}
        self._timed: dict[str, deque[float]] = {}
        self._open: dict[str, _Call] = {}  # the slowed calls under way, by phase

    def inside(self, phase: str) -> AbstractContextManager[None]:
        """A block for the phase's work; as it ends, the wait for its share, inside the phase.

        An unslowed phase gets a block that does nothing: every phase of every cycle enters
        one, so it costs an attribute lookup, not a timing.
        """
        fraction = self.fractions.get(phase)
        if not fraction:
            return _UNSLOWED
        return self._on_cuda(phase, fraction) if self.cuda else self._on_cpu(phase, fraction)

    def aside(self, phase: str) -> AbstractContextManager[None]:
        """A block inside the phase's own block whose time is not the phase's (another phase's
        work); where the phase is not being slowed, a block that does nothing."""
        call = self._open.get(phase)
        return _UNSLOWED if call is None else self._set_aside(call)

    @contextmanager
    def _set_aside(self, call: _Call) -> Iterator[None]:
        if self.cuda:
            call.segments[-1] = (call.segments[-1][0], _recorded())
            yield
            call.segments.append((_recorded(), call.segments[-1][1]))
        else:
            began = time.perf_counter()
            yield
            call.aside_s += time.perf_counter() - began

    @contextmanager
    def _on_cpu(self, phase: str, fraction: float) -> Iterator[None]:
        call = self._open[phase] = _Call(time.perf_counter())
        try:
            yield
        finally:
            del self._open[phase]
        wait_s(fraction * (time.perf_counter() - call.began - call.aside_s))

    @contextmanager
    def _on_cuda(self, phase: str, fraction: float) -> Iterator[None]:
        if torch.cuda.is_current_stream_capturing():  # inside a graph being captured
            yield
            return
        start = _recorded()
        call = self._open[phase] = _Call(0.0, [(start, start)])
        try:
            yield
        finally:
            del self._open[phase]
        call.segments[-1] = (call.segments[-1][0], _recorded())
        self._pending.setdefault(phase, deque()).append(call.segments)
        phase_ms = self.phase_ms(phase)
        if phase_ms is not None:
            cycles = round(fraction * phase_ms * self.cycles_per_ms)
            if cycles > 0:
                torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]

    def phase_ms(self, phase: str) -> float | None:
        """The median ms of the phase's last timed calls whose events the GPU has passed."""
        pending = self._pending.get(phase, deque())
        timed = self._timed.setdefault(phase, deque(maxlen=TIMED_CALLS))
        while pending and pending[0][-1][1].query():  # type: ignore[no-untyped-call]
            segments = pending.popleft()
            timed.append(sum(float(start.elapsed_time(end)) for start, end in segments))
        return statistics.median(timed) if timed else None


class _Call:
    """A slowed phase call under way: when it began (CPU), the time set aside in it so far,
    and on CUDA its segments (event pairs, the last one's end still to come)."""

    def __init__(
        self, began: float, segments: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None = None
    ) -> None:
        self.began = began
        self.aside_s = 0.0
        self.segments = segments or []


def _recorded() -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    event.record()
    return event


def wait_s(seconds: float) -> None:
    """Wait ``seconds`` on the CPU: sleep for all but the last SPIN_S, spin the rest."""
    deadline = time.perf_counter() + seconds
    if seconds > 2 * SPIN_S:
        time.sleep(seconds - SPIN_S)
    while time.perf_counter() < deadline:
        pass


def cuda_sleep_cycles_per_ms(device: torch.device, cycles: int = 10_000_000) -> float:
    """Time torch.cuda._sleep on device; return the spin cycles that take one millisecond."""
    with torch.cuda.device(device):
        torch.cuda._sleep(cycles // 100)  # type: ignore[no-untyped-call]  # warm-up
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
        end.record()
        end.synchronize()
        return cycles / float(start.elapsed_time(end))
