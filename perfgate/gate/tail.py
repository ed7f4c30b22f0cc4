"""Do the current runs have more slow repeats than the baseline's? A test of the distribution.

A change can leave the median of a run where it was and still cost throughput: two repeats
of five 12% slower (a cache that is flushed now and then, a lock taken by every third batch)
lower the mean by about 5% while the median stays put. The median test of
perfgate.gate.judge cannot see that. This test counts, on each side, the repeats that fell
behind their own run's centre by more than the tolerance, and asks whether the current runs
have more of them than the baseline's rate explains (Fisher's exact test, one-sided). When
they do, the slow repeats are part of the change, and the gate judges the mean of the
repeats, which counts them, instead of the median, which ignores them.

A run's centre is the one the median test judges: the median of the bulk of its repeats
(perfgate.gate.stats.median_of_bulk). So two slow repeats of three, which that centre leaves
out, are counted here as slow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.gate.stats import median_of_bulk

# The test's level. It claims nothing by itself (it chooses which summary of a run is
# judged), so it trades runs for sensitivity rather than holding an error rate.
SLOW_TAIL_LEVEL = 0.2


@dataclass(frozen=True)
class SlowTail:
    """Per side, the repeats that fell behind their run's centre by more than the tolerance.

    ``p_value`` is the one-sided chance of at least ``current_slow`` slow current repeats if
    both sides shared one rate of slow repeats; small values say the current runs have a
    slow tail the baseline does not. :attr:`heavier` is that verdict at
    :data:`SLOW_TAIL_LEVEL`.
    """

    baseline_slow: int
    baseline_repeats: int
    current_slow: int
    current_repeats: int
    p_value: float

    @property
    def heavier(self) -> bool:
        """True when the current runs have significantly more slow repeats than the baseline."""
        return self.p_value <= SLOW_TAIL_LEVEL

    def describe(self, tolerance: float) -> str:
        """One phrase: how many repeats fell behind their run, on each side."""
        return (
            f"{self.current_slow} of {self.current_repeats} repeats over {tolerance:.1%} behind "
            f"their run's centre (baseline {self.baseline_slow} of {self.baseline_repeats})"
        )


def count_slow(
    runs: Sequence[Sequence[float]], worst: float, reach: float = math.inf
) -> tuple[int, int]:
    """How many of the repeats fell behind their own run's centre by more than ``worst``.

    ``runs`` hold each repeat's goodness (the log of the value where higher is better, its
    negative otherwise); ``worst`` is the tolerance on that scale (negative). A run's centre
    is the median of the bulk of its repeats, those within ``reach`` of each other (all of
    them by default: the plain median).
    Returns the slow count and the number of repeats.

    >>> count_slow([[0.0, -0.4, -0.67]], worst=-0.03)  # the plain median is slow itself
    (1, 3)
    >>> count_slow([[0.0, -0.4, -0.67]], worst=-0.03, reach=0.1)  # no bulk: the fastest
    (2, 3)
    >>> count_slow([[0.0, -0.4, -0.41]], worst=-0.03, reach=0.1)  # the bulk is slow
    (0, 3)
    """
    slow = 0
    for run in runs:
        centre = median_of_bulk(run, reach)
        slow += sum(1 for value in run if value - centre < worst)
    return slow, sum(len(run) for run in runs)


def slow_tail(
    baseline: Sequence[Sequence[float]],
    current: Sequence[Sequence[float]],
    worst: float,
    reach: float = math.inf,
) -> SlowTail:
    """Compare the slow repeats of both sides (goodness per repeat, as in :func:`count_slow`).

    >>> base = [[0.0, 0.001, -0.001, 0.002, 0.0]] * 5
    >>> slow = [[0.0, 0.001, -0.001, -0.13, -0.13]] * 3  # two of five repeats 12% slower
    >>> tail = slow_tail(base, slow, worst=-0.03)
    >>> (tail.current_slow, tail.baseline_slow, tail.heavier)
    (6, 0, True)
    """
    base_slow, base_total = count_slow(baseline, worst, reach)
    cur_slow, cur_total = count_slow(current, worst, reach)
    return SlowTail(
        baseline_slow=base_slow,
        baseline_repeats=base_total,
        current_slow=cur_slow,
        current_repeats=cur_total,
        p_value=fisher_greater(cur_slow, cur_total, base_slow, base_total),
    )


def fisher_greater(hits: int, draws: int, other_hits: int, other_draws: int) -> float:
    """One-sided Fisher exact test: the chance of ``hits`` or more in ``draws``, by chance.

    Of ``draws + other_draws`` items, ``hits + other_hits`` are hits; ``draws`` of them are
    drawn at random. Returns the hypergeometric chance that at least ``hits`` hits are drawn.

    >>> round(fisher_greater(2, 5, 0, 25), 4)  # 2 of 5 against 0 of 25: 10 / C(30, 2)
    0.023
    >>> fisher_greater(0, 5, 3, 25)
    1.0
    """
    population, successes = draws + other_draws, hits + other_hits
    total = math.comb(population, draws)
    tail = sum(
        math.comb(successes, k) * math.comb(population - successes, draws - k)
        for k in range(hits, min(successes, draws) + 1)
    )
    return min(1.0, tail / total)
