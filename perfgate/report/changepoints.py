"""Change points in a metric's history: where its level shifted, and by how much. Pure.

The method is Hunter's (Fleming et al., ICPE 2023; now Apache Otava): E-divisive means
(Matteson & James, 2014) proposes where a series splits, a Student t-test between the
segments on either side decides whether the split is real. Two passes:

1. Split: slide a window of ``window`` points over the series, half a window at a time; in
   each window, the split that maximises the energy statistic ``Q`` is a candidate, kept as a
   *weak* change point when its t-test p-value is below a relaxed level (10x ``max_p``).
2. Merge: repeatedly drop the weakest change point (largest p-value; once all pass
   ``max_p``, the smallest relative change, while it is below ``min_change``), re-testing its
   neighbours against their new, wider segments, until every one left is significant.

Differences from Otava, on purpose: each window proposes one split (Otava recurses inside a
window; with windows overlapping by half, a second shift in the same window is the best split
of the next one); segments are at least ``min_size`` points and a split counts only when the
segments' medians move with their means (a single odd run is not a level shift; Otava PR
#150 added a minimum segment length for the same reason); the windows are scored all at once
with numpy. Defaults are Otava's: window 50, p < 0.001.

Like every retrospective detector, a shift at the end of the history is reported once
``min_size`` runs after it have been recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray

WINDOW = 50
MAX_P = 0.001
MIN_SIZE = 3


@dataclass(frozen=True)
class ChangePoint:
    """A shift in a series' level, between the segments on either side of it.

    ``index`` is the first point of the new level. ``before`` and ``after`` are the means of
    the segments between this change point and its neighbours (or the series' ends), and
    ``p_value`` the two-sided Student t-test of "these segments have the same mean": a small
    p-value means the shift is unlikely to be noise.
    """

    index: int
    before: float
    after: float
    p_value: float

    @property
    def change(self) -> float | None:
        """Relative change of the level, ``after / before - 1``; None when ``before`` is 0."""
        return self.after / self.before - 1.0 if self.before else None


def detect_change_points(
    values: Sequence[float] | NDArray[np.float64],
    window: int = WINDOW,
    max_p: float = MAX_P,
    min_change: float = 0.0,
    min_size: int = MIN_SIZE,
) -> list[ChangePoint]:
    """Find the shifts in the level of ``values`` (in order: a metric over runs).

    Parameters
    ----------
    values
        The series, oldest first; no NaN (leave out runs that lack the metric).
    window
        Points per window of the split pass (at least ``2 * min_size``).
    max_p
        A change point is kept when its t-test p-value is below this.
    min_change
        ...and its relative change is larger than this, in absolute value (0: any).
    min_size
        Fewest points on either side of a change point.

    Returns
    -------
    list of ChangePoint
        In index order; empty when the series holds no significant shift (a series of
        noise around one level gives, with the default ``max_p``, almost never one).

    Examples
    --------
    >>> [c.index for c in detect_change_points([10.0, 10.1, 9.9, 10.0] * 5 + [12.0] * 20)]
    [20]
    """
    series = np.asarray(values, dtype=np.float64)
    if len(series) < 2 * min_size:
        return []
    weak_p = max_p * 10 if max_p < 0.05 else max_p
    candidates = _split(series, max(window, 2 * min_size), min_size, weak_p)
    return _merge(series, candidates, max_p, min_change)


def _split(series: NDArray[np.float64], window: int, min_size: int, weak_p: float) -> list[int]:
    """The weak change points: each window's best split, when its t-test passes ``weak_p``."""
    width = min(window, len(series))
    starts = np.arange(0, len(series) - width + 1, max(width // 2, 1))
    if starts[-1] != len(series) - width:
        starts = np.append(starts, len(series) - width)  # the last window ends at the end
    windows = np.lib.stride_tricks.sliding_window_view(series, width)[starts]
    splits = starts + _best_splits(windows, min_size)
    t = _Segments(series).t_statistics(starts, splits, starts + width)
    # Every window has the same width, so one critical value serves them all.
    passed = np.abs(t) > critical_t(weak_p, width - 2)
    return sorted({int(i) for i in splits[passed]})


def _best_splits(windows: NDArray[np.float64], min_size: int) -> NDArray[np.int64]:
    """Per window (row), the split tau maximising the E-divisive statistic Q(tau).

    For left = x[:tau] (m points) and right = x[tau:] (n points), with alpha = 1::

        Q = m n / (m + n) * (2/(m n) sum|x - y| - sum|x - x'| / C(m,2) - sum|y - y'| / C(n,2))

    The three sums, for every tau at once, come from the distance matrix's row sums and the
    sums of its upper triangle by column.
    """
    count, width = windows.shape
    tau = np.arange(min_size, width - min_size + 1)
    if len(tau) == 0:
        return np.zeros(count, dtype=np.int64)
    distances = np.abs(windows[:, :, None] - windows[:, None, :])  # [window, i, j]
    rows = distances.sum(axis=2)
    above = np.triu(np.ones((width, width)), k=1)  # pairs i < j
    pairs_before = np.cumsum((distances * above).sum(axis=1), axis=1)  # within x[:j+1]
    left = 2 * pairs_before[:, tau - 1]  # sum over i, j < tau: each pair twice
    cross = np.cumsum(rows, axis=1)[:, tau - 1] - left
    right = rows.sum(axis=1)[:, None] - 2 * cross - left
    m, n = tau.astype(np.float64), (width - tau).astype(np.float64)
    within_left = np.divide(left, m * (m - 1), out=np.zeros_like(left), where=m > 1)
    within_right = np.divide(right, n * (n - 1), out=np.zeros_like(right), where=n > 1)
    q = m * n / (m + n) * (2 * cross / (m * n) - within_left - within_right)
    return np.asarray(tau[np.argmax(q, axis=1)], dtype=np.int64)


@cache
def critical_t(p_value: float, df: int) -> float:
    """The |t| above which a two-sided Student t-test with ``df`` degrees has p < p_value."""
    low, high = 0.0, 1.0
    while student_t_two_sided(high, df) > p_value:
        low, high = high, high * 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_two_sided(middle, df) > p_value else (low, middle)
    return high


def _merge(
    series: NDArray[np.float64], candidates: list[int], max_p: float, min_change: float
) -> list[ChangePoint]:
    """Drop the weakest change point until every one left is significant (Hunter's merge)."""
    segments = _Segments(series)
    bounds = [0, *candidates, len(series)]
    tested = [segments.change_point(*bounds[i : i + 3]) for i in range(len(candidates))]
    while tested:
        weakest = max(range(len(tested)), key=lambda i: tested[i].p_value)
        if tested[weakest].p_value < max_p:
            weakest = min(range(len(tested)), key=lambda i: abs(tested[i].change or 0.0))
            if abs(tested[weakest].change or 0.0) > min_change:
                return tested
        del tested[weakest]
        # Only the neighbours' segments changed: re-test those two.
        for i in (weakest - 1, weakest):
            if 0 <= i < len(tested):
                start = tested[i - 1].index if i > 0 else 0
                stop = tested[i + 1].index if i + 1 < len(tested) else len(series)
                tested[i] = segments.change_point(start, tested[i].index, stop)
    return []


class _Segments:
    """Means, variances and t-tests of any segment of a series, in O(1) from prefix sums."""

    def __init__(self, series: NDArray[np.float64]) -> None:
        # Centred first: prefix sums of squares of large values lose the variance otherwise.
        self.series = series
        self.offset = float(np.mean(series))
        centred = series - self.offset
        self.sums = np.concatenate(([0.0], np.cumsum(centred)))
        self.squares = np.concatenate(([0.0], np.cumsum(centred * centred)))

    def stats(self, start: int, stop: int) -> tuple[int, float, float]:
        """Count, centred mean and sum of squared deviations of series[start:stop]."""
        count = stop - start
        total = float(self.sums[stop] - self.sums[start])
        mean = total / count
        squares = float(self.squares[stop] - self.squares[start]) - total * mean
        return count, mean, max(squares, 0.0)

    def t_statistics(
        self, starts: NDArray[np.int64], splits: NDArray[np.int64], stops: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """Pooled two-sample t of [start:split] against [split:stop], for many at once.

        Infinite where both segments are flat at different levels, 0 where they are equal.
        """
        m, n = (splits - starts).astype(np.float64), (stops - splits).astype(np.float64)
        left, right = self.sums[splits] - self.sums[starts], self.sums[stops] - self.sums[splits]
        ss = (self.squares[stops] - self.squares[starts]) - left**2 / m - right**2 / n
        pooled = np.maximum(ss, 0.0) / np.maximum(m + n - 2, 1)
        gap = right / n - left / m
        scale = np.sqrt(pooled * (1 / m + 1 / n))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(scale > 0, gap / scale, np.where(gap != 0, np.inf, 0.0))
        return np.asarray(t, dtype=np.float64)

    def p_value(self, start: int, split: int, stop: int) -> float:
        """Two-sided pooled Student t-test of series[start:split] against series[split:stop]."""
        m, mean_l, ss_l = self.stats(start, split)
        n, mean_r, ss_r = self.stats(split, stop)
        df = m + n - 2
        if df < 1:
            return 1.0
        pooled = (ss_l + ss_r) / df
        scale = math.sqrt(pooled * (1.0 / m + 1.0 / n))
        gap = abs(mean_r - mean_l)
        if scale <= 1e-12 * max(abs(mean_l), abs(mean_r), abs(self.offset), 1.0):
            return 0.0 if gap > 1e-12 * max(abs(self.offset), 1.0) else 1.0
        return student_t_two_sided(gap / scale, df)

    def change_point(self, start: int, split: int, stop: int) -> ChangePoint:
        """The split tested against its segments; p = 1 when their medians disagree.

        A t-test compares means, and a single wild run drags a short segment's mean: the
        medians must move the same way by at least half as much, or the split is no shift.
        """
        _, mean_l, _ = self.stats(start, split)
        _, mean_r, _ = self.stats(split, stop)
        p_value = self.p_value(start, split, stop)
        gap = mean_r - mean_l
        median_gap = float(np.median(self.series[split:stop]) - np.median(self.series[start:split]))
        if gap and (gap * median_gap <= 0 or abs(median_gap) < abs(gap) / 2):
            p_value = 1.0
        return ChangePoint(split, mean_l + self.offset, mean_r + self.offset, p_value)


def student_t_two_sided(t: float, df: float) -> float:
    """P(|T| >= t) for Student's t with ``df`` degrees of freedom (t >= 0, df > 0)."""
    if math.isinf(t):
        return 0.0
    return _regularized_beta(df / 2.0, 0.5, df / (df + t * t))


def _regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), by its continued fraction (Numerical Recipes' betai)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return result
