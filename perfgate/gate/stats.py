"""Small, exact statistics the gate needs, in pure Python (no numpy, no scipy).

Student's t distribution (CDF and quantile), medians, and a robust spread. Each function is
deterministic and cheap: the gate calls them a handful of times per verdict, and the
verdict-quality benchmark calls the gate hundreds of thousands of times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

# The median of |X - Y| for X, Y independent standard normals: sqrt(2) * Phi^-1(3/4).
_PAIR_MEDIAN = 1.4142135623730951 * 0.6744897501960817


def median(values: Sequence[float]) -> float:
    """The median; the mean of the middle two for an even count. Raises on no values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def median_of_bulk(values: Sequence[float], reach: float) -> float:
    """The median of the largest group of values that lie within ``reach`` of each other.

    On a scale where larger is better (the goodness of repeats), values far from the bulk of
    their run are outliers (a flush, a neighbour's burst), and a run of three repeats has no
    median that two slow ones leave in place. Groups of equal size are settled for the best
    one: a repeat can be slowed by many things and sped up by few, so with three repeats far
    apart the fastest stands for the run. With every value within ``reach`` of the others,
    this is the plain median.

    >>> median_of_bulk([0.0, -0.001, 0.002], reach=0.1)
    0.0
    >>> median_of_bulk([0.0, -0.4, -0.001, 0.2, 0.001], reach=0.1)  # outliers both ways
    0.0
    >>> median_of_bulk([-0.67, -0.4, 0.0], reach=0.1)  # two of three repeats far behind
    0.0
    """
    return median(bulk(values, reach))


def bulk(values: Sequence[float], reach: float) -> list[float]:
    """The largest group of values within ``reach`` of each other, sorted; of groups of equal
    size the one of the largest values (see median_of_bulk).

    >>> bulk([0.0, -0.4, -0.001, 0.2, 0.001], reach=0.1)
    [-0.001, 0.0, 0.001]
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("bulk of no values")
    best_start, best_size, end = 0, 0, 0
    for start, low in enumerate(ordered):
        end = max(end, start)
        while end + 1 < len(ordered) and ordered[end + 1] - low <= reach:
            end += 1
        if end - start + 1 >= best_size:
            best_start, best_size = start, end - start + 1
    return ordered[best_start : best_start + best_size]


def median_variance_factor(n: int) -> float:
    """Variance of the median of ``n`` normal draws, in units of one draw's variance.

    Exact for n <= 2 (the median is the mean); the large-sample ``pi / (2 n)`` above,
    which overstates the exact small-sample values by under 10% (n=5: 0.314 vs 0.287), so a
    floor built on it errs on the cautious side.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    return 1.0 / n if n <= 2 else math.pi / (2.0 * n)


def pooled_pairwise_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """A robust within-group standard deviation pooled over groups, and its pair count.

    Every pair of values inside the same group contributes its absolute difference; the median
    of those differences, divided by ``sqrt(2) * 0.6745``, estimates a normal sd (a pooled form
    of Shamos' estimator). Pairs never span groups, so shifts between groups (runs) do not
    count, and no group centre is estimated, so small groups give no bias. A few wild values
    move the median of many pairs little. Returns None when no group has two values.
    """
    differences = [
        abs(a - b) for group in groups for i, a in enumerate(group) for b in group[i + 1 :]
    ]
    if not differences:
        return None
    return median(differences) / _PAIR_MEDIAN, len(differences)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F > f) for Fisher's F with ``df1`` and ``df2`` degrees of freedom (both > 0).

    The chance that a variance estimated with ``df1`` degrees of freedom exceeds another,
    estimated with ``df2``, by the ratio ``f`` or more when both estimate the same variance.
    """
    if df1 <= 0 or df2 <= 0:
        raise ValueError("degrees of freedom must be > 0")
    if f <= 0.0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return 1.0 - regularized_beta(df1 / 2.0, df2 / 2.0, df1 * f / (df1 * f + df2))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df > 0)."""
    if df <= 0:
        raise ValueError("df must be > 0")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """The quantile of Student's t: the t with P(T <= t) = p (0 < p < 1).

    Found by bisection on :func:`t_cdf` to 1e-10; cached, since the gate asks for the same
    few quantiles again and again.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
        if high > 1e12:
            return math.inf
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10 * max(1.0, high):
            break
    return (low + high) / 2.0
