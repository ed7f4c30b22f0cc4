"""One estimate against its tolerance: the interval rule, and what it claims. Pure.

The interval of a change runs from its ``beta`` lower bound to its ``alpha`` upper bound
(Student's t), on the goodness scale, where a regression is always a goodness below the
tolerance's: perfgate.gate.judge says what the levels mean over a scenario's looks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfgate.gate.estimate import ChangeEstimate
from perfgate.gate.stats import t_cdf, t_ppf
from perfgate.gate.tail import SlowTail
from perfgate.gate.verdict import Status
from perfgate.metrics import Direction

DEFAULT_BETA = 0.2  # the chance, over all looks, of passing a change exactly at the tolerance


@dataclass(frozen=True)
class Judgement:
    """One metric's decision: its status and the interval that made it.

    ``estimate`` is the estimate that decided (by the median of the repeats, or by their
    mean when the slow tail called for it); ``ci_low``/``ci_high`` bound its relative change
    (``current / baseline - 1``) in the metric's own terms; ``p_regression`` is the one-sided
    p-value of "no regression beyond the tolerance" (small: strong evidence of a regression)
    and ``alpha`` the level it was compared with: a regression is claimed exactly when
    ``p_regression < alpha``, once the spread between launches has been seen. ``tail`` is
    the slow-repeat test (None where it was not run) and ``settle`` the chance that the
    remaining runs decide an inconclusive metric (None where nothing was left to settle).
    """

    status: Status
    estimate: ChangeEstimate
    ci_low: float
    ci_high: float
    p_regression: float
    alpha: float
    tail: SlowTail | None = None
    settle: float | None = None


def tolerance_bounds(direction: Direction, tolerance: float) -> tuple[float, float]:
    """The regression and improvement thresholds on the log-goodness scale.

    Goodness is the log change for a metric where higher is better and its negative
    otherwise, so a regression is always a goodness below the first number.
    """
    if direction is Direction.HIGHER_IS_BETTER:
        return math.log1p(-tolerance), math.log1p(tolerance)
    return -math.log1p(tolerance), -math.log1p(-tolerance)


def _sign(direction: Direction) -> float:
    return 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0


def goodness(estimate: ChangeEstimate, direction: Direction) -> float:
    """The estimated change on the goodness scale: its log, negated where lower is better."""
    return _sign(direction) * estimate.log_change


def p_regression(estimate: ChangeEstimate, direction: Direction, tolerance: float) -> float:
    """One-sided p-value of "the change is not worse than the tolerance".

    Small values are evidence of a regression beyond the tolerance; 0.5 means the estimate
    sits exactly at the tolerance.
    """
    if math.isinf(estimate.se):
        return 1.0
    worst, _ = tolerance_bounds(direction, tolerance)
    return t_cdf((goodness(estimate, direction) - worst) / estimate.se, estimate.df)


def decide(
    estimate: ChangeEstimate,
    direction: Direction,
    tolerance: float,
    *,
    alpha: float,
    beta: float = DEFAULT_BETA,
    final: bool = True,
    pass_with_excess: bool = True,
) -> Judgement:
    """Decide one estimate at level ``alpha`` (already corrected for the family).

    Returns a :class:`Judgement` whose interval runs from the ``beta`` lower bound to the
    ``alpha`` upper bound of the goodness, converted back to the metric's relative change.
    The upper bound (a regression's) rests on the estimate's ``se``; the lower bound (a
    pass's) too, unless ``pass_with_excess`` is False: then on its ``pass_se``, which leaves
    out a lone current run's excess spread.
    With one run on each side (the spread between launches unseen) a claim is made only when
    ``final`` says no other run can ever come and the repeats alone must do, as when a
    sweep compares two of its points; the gate itself passes ``final=False``.
    """
    worst, best = tolerance_bounds(direction, tolerance)
    g = goodness(estimate, direction)
    pass_se = estimate.se if pass_with_excess else estimate.pass_se
    low = g - t_ppf(1.0 - beta, estimate.df) * pass_se  # -inf when se is inf
    high = g + t_ppf(1.0 - alpha, estimate.df) * estimate.se
    if not estimate.between_seen and not final:
        status = Status.INCONCLUSIVE
    elif high < worst:
        status = Status.REGRESSION
    elif low > best:
        status = Status.IMPROVEMENT
    elif low >= worst:
        status = Status.PASS
    else:
        status = Status.INCONCLUSIVE
    ci_low, ci_high = _to_change(low, high, direction)
    return Judgement(
        status=status,
        estimate=estimate,
        ci_low=ci_low,
        ci_high=ci_high,
        p_regression=p_regression(estimate, direction, tolerance),
        alpha=alpha,
    )


def _to_change(low: float, high: float, direction: Direction) -> tuple[float, float]:
    """A goodness interval as an interval of the relative change, in the metric's terms."""
    if direction is Direction.HIGHER_IS_BETTER:
        return math.expm1(low), math.expm1(high)
    return math.expm1(-high), math.expm1(-low)
