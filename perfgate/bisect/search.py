"""The bisection: which commit to measure next, and what the commits measured so far say. Pure.

The range's commits are numbered 0 (the good end) to ``size`` (the bad end); a bisect
starts once the bad end is like bad (perfgate.bisect.run checks that first). The search
keeps the last commit known like good (``low``, at first 0) and the first known like bad
after it (``high``, at first ``size``) and measures the commit halfway between, until they
are neighbours: ``high`` is then the first commit like bad, the one named. With ``size``
commits after the good end that takes at most ``ceil(log2(size))`` commits besides the ends.

The same classifications always give the same path (the next commit is computed from them,
not remembered), so a bisect resumed from the history takes the path it was on. A commit
undecided, or between the ends, stops the search there: its neighbours cannot say which
side it is on. A commit that could not be measured (its servers failed) is stepped around,
as ``git bisect skip`` does: the untried commit nearest the middle is measured instead;
when none is left the range between ``low`` and ``high`` is the answer.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass


class Likeness(enum.StrEnum):
    """What a commit's runs say, judged against the good end's runs by the gate."""

    GOOD = "like-good"  # every metric of the bisect within its tolerance of the good end
    BAD = "like-bad"  # a metric of the bisect a regression against the good end
    UNDECIDED = "undecided"  # an interval across the tolerance, the run budget spent
    BETWEEN = "between"  # a regression against the good end, but nearer it than the bad end
    FAILED = "failed"  # could not be measured: its servers did not start or failed


@dataclass(frozen=True)
class Position:
    """Where a search stands: the bounds, and the commit to measure next (if any)."""

    low: int  # the last commit known like good
    high: int  # the first commit known like bad after it
    next: int | None  # the commit to measure next; None when the search is over
    steps: int  # commits between the ends classified on the way here
    stopped_at: int | None = None  # the undecided commit that ended the search

    @property
    def named(self) -> int | None:
        """The first commit like bad, once its parent is known like good."""
        return self.high if self.high - self.low == 1 else None

    @property
    def undecided(self) -> bool:
        return self.stopped_at is not None

    def left(self) -> int:
        """Commits that may still be the first like bad: those after `low` up to `high`."""
        return self.high - self.low


def max_steps(size: int) -> int:
    """The most commits between the ends a range of `size` commits after the good end needs.

    >>> [max_steps(n) for n in (1, 2, 3, 4, 5, 8, 9, 1000)]
    [0, 1, 2, 2, 3, 3, 4, 10]
    """
    return math.ceil(math.log2(size)) if size > 1 else 0


def locate(size: int, known: Mapping[int, Likeness]) -> Position:
    """Replay the search over the commits classified so far (index -> likeness).

    The ends need no entry: 0 is like good and ``size`` like bad by the time this is asked.

    >>> locate(8, {}).next
    4
    >>> locate(8, {4: Likeness.GOOD, 6: Likeness.BAD}).next
    5
    >>> locate(8, {4: Likeness.GOOD, 6: Likeness.BAD, 5: Likeness.BAD}).named
    5
    """
    if size < 1:
        raise ValueError("a range holds at least the bad end")
    low, high, steps = 0, size, 0
    while high - low > 1:
        candidate = _middle(low, high, known)
        if candidate is None:  # every commit between failed
            return Position(low, high, None, steps)
        found = known.get(candidate)
        if found is None:
            return Position(low, high, candidate, steps)
        steps += 1
        if found is Likeness.GOOD:
            low = candidate
        elif found is Likeness.BAD:
            high = candidate
        else:
            return Position(low, high, None, steps, stopped_at=candidate)
    return Position(low, high, None, steps)


def _middle(low: int, high: int, known: Mapping[int, Likeness]) -> int | None:
    """The commit halfway between, or the one nearest it that did not fail (lower first)."""
    middle = (low + high) // 2
    for distance in range(high - low):
        for candidate in (middle - distance, middle + distance):
            if low < candidate < high and known.get(candidate) is not Likeness.FAILED:
                return candidate
    return None


def failed_between(position: Position, known: Mapping[int, Likeness]) -> list[int]:
    """The commits after `low` and before `high` that could not be measured."""
    return [i for i in range(position.low + 1, position.high) if known.get(i) is Likeness.FAILED]
