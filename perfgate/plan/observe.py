"""The model's input from the profiled server: its probe records, split by what was running.

The profiled server's cycles are told apart by wall-clock windows, one per timed repeat (the
run's figures): the warm-up's and the other requests' cycles count in none. Only rank 0's
records count, as in every figure a run records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfgate import metrics
from perfgate.plan.forecast import COSTS, Measured, Observation, Repeat
from perfgate.probe.reader import CycleRecord
from perfgate.results import ModeResult

Window = tuple[float, float]  # wall clock, seconds since the epoch: start, end


def cycles_in(records: Sequence[CycleRecord], window: Window) -> list[CycleRecord]:
    """Rank 0's decode cycles that began inside `window`, in the order they began."""
    start, end = window
    return [
        r
        for r in records
        if r.kind == metrics.CYCLE and r.rank == 0 and start <= r.started_at <= end
    ]


def sequence_depths(cycles: Sequence[CycleRecord]) -> tuple[tuple[int, ...], ...]:
    """Per sequence (by its row), the drafts it accepted in each of `cycles`, in order."""
    by_row: dict[int, list[int]] = {}
    for cycle in cycles:
        for row, drafts in zip(cycle.rows, cycle.accepted, strict=False):
            by_row.setdefault(row, []).append(drafts)
    return tuple(tuple(by_row[row]) for row in sorted(by_row))


def observe(
    records: Sequence[CycleRecord],
    *,
    steps: int,
    sequences: int,
    repeat_windows: Sequence[Window],
    tok_s: Sequence[float],
    tokens: int,
    budget: int | None = None,
    plain: ModeResult | None = None,
    verify_ms_by_width: Mapping[int, float] | None = None,
) -> Observation:
    """The observation of one profiled run: each repeat's cycles, depths and time (its
    tokens over its tok/s, as its figure was measured), each sequence's `budget` (max new
    tokens), the plain twin's tok/s and mean decode step per repeat, and the verify forward
    at each width where the server timed it."""
    repeats = []
    for window, rate in zip(repeat_windows, tok_s, strict=True):
        cycles = cycles_in(records, window)
        repeats.append(
            Repeat(
                elapsed_s=tokens / rate,
                tokens=tokens,
                cycles=tuple(c.ms for c in cycles),
                depths=sequence_depths(cycles),
                every=max((c.every for c in cycles), default=1),
            )
        )
    plain_tok_s = plain.samples.get("output_tok_s", ()) if plain is not None else ()
    plain_step_ms = plain.phase_ms().get(metrics.CYCLE, ()) if plain is not None else ()
    widths = tuple(sorted((verify_ms_by_width or {}).items()))
    return Observation(
        steps, sequences, tuple(repeats), budget, tuple(plain_tok_s), tuple(plain_step_ms), widths
    )


def measured_costs(steps: int, result: ModeResult) -> Measured | None:
    """A measured step count's costs for the refit: per repeat, each phase's mean ms per
    cycle; None where a repeat did not time every phase (nothing to refit from)."""
    per_phase = result.phase_ms()
    columns = [per_phase.get(phase, ()) for phase in COSTS]
    count = len(columns[-1])
    if count == 0 or any(len(column) != count for column in columns):
        return None
    repeats = tuple(dict(zip(COSTS, row, strict=True)) for row in zip(*columns, strict=True))
    return Measured(steps, repeats)
