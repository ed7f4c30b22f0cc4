"""When to stop a branch of a sweep early: once it is clearly past its best. Pure.

Along a branch (one environment point and topk, steps ascending) tok/s usually rises while
the longer drafts pay for themselves, then falls as drafting costs more than it brings.
Once two points in a row are *clearly worse* than the branch's best point so far, the branch
is past its peak and its remaining points are skipped.

*Clearly worse* is the gate's own word: judging the point's ``output_tok_s`` repeats
against the best point's repeats as if they were a baseline, the gate (perfgate.gate.judge,
on its last run, one-sided level ``STOP_ALPHA``) calls it a ``regression`` beyond the
scenario's ``output_tok_s`` tolerance. So a point is clearly worse only when it is worse by
more than the tolerance *and* by more than the noise of the repeats says it could be by
chance; with a single repeat per point nothing is ever clearly worse (the noise is unknown),
and the sweep runs the whole grid.

The best point is the fastest (median tok/s) whose outputs were equivalent to the plain
twin's, or, while no point of the branch passed equivalence, the fastest of all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfgate.gate.estimate import estimate_change
from perfgate.gate.judge import decide
from perfgate.gate.verdict import Status
from perfgate.metrics import Direction

STOP_ALPHA = 0.05  # one-sided: the chance of calling an equally fast point clearly worse
WORSE_IN_A_ROW = 2  # clearly worse points in a row that end a branch


def clearly_worse(best: Sequence[float], point: Sequence[float], tolerance: float) -> bool:
    """Whether `point`'s tok/s repeats are clearly worse than `best`'s (see the module doc).

    >>> clearly_worse([100, 101, 99, 100], [80, 81, 79, 80], 0.03)
    True
    >>> clearly_worse([100, 101, 99, 100], [99, 100, 98, 101], 0.03)
    False
    >>> clearly_worse([100], [50], 0.03)  # one repeat each: the noise is unknown
    False
    """
    estimate = estimate_change([best], [point])
    if estimate is None:
        return False
    judgement = decide(
        estimate, Direction.HIGHER_IS_BETTER, tolerance, alpha=STOP_ALPHA, final=True
    )
    return judgement.status is Status.REGRESSION


@dataclass
class BranchTracker:
    """Follows one branch's points in order and says when the branch should stop."""

    tolerance: float
    best: tuple[float, ...] | None = None
    best_equivalent: bool = False
    worse_in_a_row: int = 0
    verdicts: list[bool] = field(default_factory=list)  # clearly worse, per point seen
    stop_index: int | None = None  # the point after which the branch is past its best

    def observe(self, tok_s: Sequence[float], equivalent: bool) -> bool:
        """Take the next point's tok/s repeats; return whether it is clearly worse."""
        worse = self.best is not None and clearly_worse(self.best, tok_s, self.tolerance)
        self.verdicts.append(worse)
        self.worse_in_a_row = self.worse_in_a_row + 1 if worse else 0
        if self.stopped and self.stop_index is None:
            self.stop_index = len(self.verdicts) - 1
        if self._better_than_best(tok_s, equivalent):
            self.best, self.best_equivalent = tuple(tok_s), equivalent
        return worse

    @property
    def stopped(self) -> bool:
        """Whether the branch is past its best: the points after this are skipped."""
        return self.worse_in_a_row >= WORSE_IN_A_ROW

    def _better_than_best(self, tok_s: Sequence[float], equivalent: bool) -> bool:
        if not any(math.isfinite(v) for v in tok_s):
            return False
        if self.best is None:
            return True
        if equivalent != self.best_equivalent:
            return equivalent  # an equivalent point outranks any inequivalent one
        return _median(tok_s) > _median(self.best)


def _median(values: Sequence[float]) -> float:
    return statistics.median(v for v in values if math.isfinite(v))
