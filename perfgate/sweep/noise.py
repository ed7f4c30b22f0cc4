"""Whether two points of a sweep differ beyond noise, judged between launches. Pure.

A point's figures move from one launch of its server to the next (where a process lands, the
state a GPU starts in) more than between the repeats of one launch: over ten fresh launches
on an H200, the speculative server's tok/s scattered 2.63% between launches against 0.91%
within one (benchmarks/results/h200-real-weights.md).
Repeats of one launch per point therefore say how sure the difference of *those two
launches* is, not of the two settings.

So each point is given as its launches (each launch's repeats), and the gate's own estimate
(perfgate.gate.estimate_change) judges them as it judges runs: where either point has more
than one launch, the spread between launches is measured and enters the interval. With one
launch on each side only the repeats' noise can: the comparison says so
(``between_launches`` False), and measuring the points again (a sweep of the same name into
the same history) adds the launches that make it whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.gate.estimate import estimate_change
from perfgate.gate.judge import decide
from perfgate.gate.verdict import Status
from perfgate.metrics import Direction

NOISE_ALPHA = 0.05  # one-sided: the chance of calling two equal settings apart

SAID = {
    Status.IMPROVEMENT: "moved beyond noise",
    Status.REGRESSION: "moved beyond noise, the other way",
    Status.PASS: "within noise or tolerance",
    Status.INCONCLUSIVE: "inconclusive",
}


@dataclass(frozen=True)
class PointComparison:
    """What the gate's statistics say of a point against a reference point."""

    status: Status | None  # None: a side had no value to judge
    change: float | None  # the point's centre over the reference's, minus 1
    launches: tuple[int, int]  # (reference, point)

    @property
    def between_launches(self) -> bool:
        """Whether the launch-to-launch spread is in the judgement (a side has several)."""
        return max(self.launches) > 1

    def says(self) -> str:
        """``moved beyond noise (3 and 3 launches)``, or with one launch each, that the
        spread between launches is not in it."""
        if self.status is None:
            return "no samples"
        if self.between_launches:
            return f"{SAID[self.status]} ({self.launches[0]} and {self.launches[1]} launches)"
        return f"{SAID[self.status]} (one launch each: the spread between launches is not in it)"


def compare_points(
    reference: Sequence[Sequence[float]],
    point: Sequence[Sequence[float]],
    direction: Direction,
    tolerance: float,
    alpha: float = NOISE_ALPHA,
) -> PointComparison:
    """Judge `point` against `reference`, each given as its launches' repeats of one metric.

    >>> slow, fast = [[4.70, 4.71, 4.69]], [[4.03, 4.02, 4.04]]
    >>> one = compare_points(slow, fast, Direction.LOWER_IS_BETTER, 0.03)
    >>> one.status.value, one.between_launches
    ('improvement', False)
    """
    launches = (len(reference), len(point))
    estimate = estimate_change(reference, point)
    if estimate is None:
        return PointComparison(None, None, launches)
    judgement = decide(estimate, direction, tolerance, alpha=alpha, final=True)
    return PointComparison(judgement.status, estimate.current / estimate.baseline - 1, launches)
