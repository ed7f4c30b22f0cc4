"""The looks of a scenario: how the error rates are spent over them, and when to look again.

A scenario is judged after its first run and, while a verdict is ``inconclusive``, after
each run measured again, up to ``max_runs`` runs: up to ``max_runs`` looks at the data. Each
look could claim a regression or a pass by chance, so each spends a share of ``alpha`` and of
``beta`` and the shares of all looks add up to one (Bonferroni over the looks): whatever the
correlation between looks, the chance of a false claim over the whole loop stays within the
stated level.

Another run is measured only where it can change the outcome (see :func:`settle_chance`):
never once a regression decides the scenario's status, and not for a metric whose estimate
sits so close to its tolerance that the remaining runs would most likely leave it undecided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfgate.gate.estimate import ChangeEstimate
from perfgate.gate.stats import t_ppf

# Another run is measured for an undecided metric only if the remaining runs would settle it
# with at least this chance (judged at the estimate's own value: see settle_chance).
MIN_SETTLE_CHANCE = 0.05
# The same for a metric judged on its mean (a slow tail in the current runs). The means of
# runs scatter with every slow repeat they hold, so a mean near its tolerance mostly stays
# undecided whatever is measured: at 5%, more than half of the runs with a slow share of
# repeats at 0.75x the tolerance were measured again and about half of those ended
# inconclusive anyway. At 30% alone the runs per verdict of that shape fell from 1.78 to 1.68
# (1000 trials per cell: rule E2 of benchmarks/results/gate-quality.md).
MIN_SETTLE_CHANCE_BY_MEAN = 0.3


# How a loop of looks spends alpha: the first look this share, the looks between the first and
# the last this share together, the last the rest. The first look already decides most large
# changes; the last has the most runs, so it is where a share buys the most detection: with
# launches scattering 3x more than repeats, 80% there instead of 60% lifts detection at twice
# the tolerance from 91% to over 95% (benchmarks/gate_quality.py).
FIRST_ALPHA = 0.1
MIDDLE_ALPHA = 0.1
# How it spends beta: the first look this share, the others the rest evenly. Most scenarios
# pass at their first look; a pass there saves every further run (85% there instead of 70%
# cuts the runs per verdict of typical noise with 3 repeats from 1.73 to 1.53).
FIRST_BETA = 0.85


def alpha_share(look: int, max_runs: int) -> float:
    """The share of ``alpha`` look ``look`` (1-based, at most ``max_runs``) spends."""
    if max_runs <= 1:
        return 1.0
    if look == 1:
        return FIRST_ALPHA
    if look < max_runs:
        return MIDDLE_ALPHA / (max_runs - 2)
    return 1.0 - FIRST_ALPHA - (MIDDLE_ALPHA if max_runs > 2 else 0.0)


def beta_share(look: int, max_runs: int) -> float:
    """The share of ``beta`` look ``look`` (1-based, at most ``max_runs``) spends."""
    if max_runs <= 1:
        return 1.0
    return FIRST_BETA if look == 1 else (1.0 - FIRST_BETA) / (max_runs - 1)


def looks_of(runs: int, first_runs: int) -> int:
    """How many looks judge ``runs`` runs whose looks come in groups of ``first_runs``.

    >>> [looks_of(n, 3) for n in (1, 3, 4, 6, 7, 9)]
    [1, 1, 2, 2, 3, 3]
    """
    first_runs = max(first_runs, 1)
    return 1 + max(-(-(runs - first_runs) // first_runs), 0)


def look_levels(alpha: float, beta: float, look: int, max_runs: int) -> tuple[float, float]:
    """The levels look ``look`` (1-based) of at most ``max_runs`` tests at: its alpha and beta.

    The shares of a full loop add up to one, for alpha and for beta. A look past the budget
    (judging more runs by hand than a session would) spends the last look's share.

    >>> [round(look_levels(0.2, 0.2, k, 3)[0], 4) for k in (1, 2, 3)]
    [0.02, 0.02, 0.16]
    >>> [round(look_levels(0.2, 0.2, k, 3)[1], 4) for k in (1, 2, 3)]
    [0.17, 0.015, 0.015]
    """
    budget = max(max_runs, 1)
    look = min(max(look, 1), budget)
    return alpha * alpha_share(look, budget), beta * beta_share(look, budget)


def scenario_alpha(levels: Sequence[float], look: int, max_runs: int) -> float | None:
    """The scenario's alpha that one look's recorded per-metric levels were spent from.

    Holm's procedure tests the metric with the smallest p-value at the look's alpha over the
    number of metrics it tests, and no metric lower: that many times the smallest level is
    the look's alpha, and the look's alpha over its share (:func:`look_levels`) is the
    scenario's. So a recorded run can be judged again at the level its session judged it,
    however many scenarios shared the session's alpha. None without levels (a run recorded
    without verdicts).

    >>> round(scenario_alpha([0.005, 0.02 / 3, 0.01, 0.02], look=1, max_runs=3), 6)
    0.2
    """
    if not levels:
        return None
    budget = max(max_runs, 1)
    return min(levels) * len(levels) / alpha_share(min(max(look, 1), budget), budget)


def min_settle_chance(centre: str) -> float:
    """The least chance of settling a metric decided on this centre that earns another run."""
    return MIN_SETTLE_CHANCE_BY_MEAN if centre == "mean" else MIN_SETTLE_CHANCE


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def settle_chance(
    estimate: ChangeEstimate,
    goodness: float,
    worst: float,
    *,
    max_runs: int,
    alpha: float,
    beta: float,
) -> float:
    """The chance that the remaining runs take an undecided metric out of ``inconclusive``.

    Parameters
    ----------
    estimate
        The metric's estimate now, after ``estimate.current_runs`` runs.
    goodness, worst
        The estimate's change and the tolerance, on the goodness scale (see gate.judge).
    max_runs
        The run budget; the chance is that of a decision at the last run.
    alpha, beta
        The levels that last look will test at.

    Returns
    -------
    float
        Between 0 and 1: the chance, if the true change is the one estimated now and the
        spread of a run stays as measured, that the last look's interval lies wholly on one
        side of the tolerance. 0 when no run is left; 1 when the spread between launches is
        still unseen (the next run is what shows it).

    Notes
    -----
    With ``m`` runs measured of ``M``, the last look's estimate is the present one moved by
    the mean of ``M - m`` new runs, weighted ``(M - m) / M``: it scatters around the present
    estimate with sd ``run_sd * sqrt(M - m) / M``. Its interval is ``t * run_sd *
    sqrt(1/K + 1/M)`` wide on each side.
    """
    runs, base = estimate.current_runs, estimate.baseline_runs
    if runs >= max_runs:
        return 0.0
    if not estimate.between_seen or not math.isfinite(estimate.run_sd):
        return 1.0
    sd = estimate.run_sd
    scatter = sd * math.sqrt(max_runs - runs) / max_runs
    se = sd * math.sqrt(1.0 / base + 1.0 / max_runs)
    df = float(base + max_runs - 2)
    regression_edge = worst - t_ppf(1.0 - alpha, df) * se
    pass_edge = worst + t_ppf(1.0 - beta, df) * se
    if scatter == 0.0:
        return 1.0 if not regression_edge <= goodness < pass_edge else 0.0
    return _normal_cdf((regression_edge - goodness) / scatter) + _normal_cdf(
        (goodness - pass_edge) / scatter
    )
