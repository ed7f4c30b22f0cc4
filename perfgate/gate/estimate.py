"""How much did a metric change? Runs of repeats in, a relative change with its error out.

The noise model (two levels, on the log scale, where a slowdown of 3% is a shift of
log(0.97) whatever the metric's size)::

    log x[run j, repeat i] = log mu + b_j + e_ij

``b_j`` is the shift a fresh server launch brings (clocks, NCCL's choices, memory layout,
a neighbour): it is shared by every repeat of that run. ``e_ij`` is the repeat-to-repeat
noise inside one run. On GPU runners the spread of ``b`` is often larger than that of ``e``,
so a test that uses only the repeats (Bencher's per-sample t-test, asv's Mann-Whitney) sees
"significant" differences between any two launches. This estimator summarises each run by
one value (the median of its repeats, or their mean), so the spread between runs is what
sets the error, with the spread of the repeats as a floor under it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from perfgate.gate.stats import (
    bulk,
    f_sf,
    median,
    median_variance_factor,
    pooled_pairwise_sd,
)
from perfgate.metrics import Direction

# No timing repeats to better than this (sd of the log, 0.1%): a spread estimated below it,
# zero above all (a constant baseline, three equal repeats), is raised to it, so no interval
# is ever of zero width and no p-value exactly 0.
MIN_SPREAD = 0.001

# A lone current run's repeats count as scattering more than the baseline's only when an F-test
# says so at this level: by chance alone, half of all runs scatter more than the pooled spread.
EXCESS_LEVEL = 0.05

# Repeats further apart than this many repeat spreads (the robust spread pooled over every
# run, at least MIN_SPREAD) are not of one bulk: a run's median is that of its largest bulk
# (perfgate.gate.stats.median_of_bulk). Far outside the noise of a repeat: with 0.5% repeat
# noise, a repeat 10% away from the rest.
OUTLIER_SPREADS = 20.0

Centre = Literal["median", "mean"]


@dataclass(frozen=True)
class ChangeEstimate:
    """What the runs say about a metric's relative change, before any decision.

    ``log_change`` is the mean of the current runs' centres (log scale) minus the baseline
    runs'; a value of log(0.95) means the current runs sit 5% below the baseline. ``se`` is
    its standard error and ``df`` the degrees of freedom behind ``se`` (Student's t applies).
    ``se`` is ``inf`` when nothing tells how noisy the metric is (one value on each side):
    no decision can then be made. ``pass_se`` is the standard error a pass is judged by:
    ``se`` without a lone current run's excess spread (see :func:`estimate_change`), the same
    as ``se`` otherwise. ``centre`` says how a run was summarised: by the median of
    its repeats (robust to a few slow ones) or by their mean (every slow repeat counts).
    """

    log_change: float
    se: float
    pass_se: float
    df: float
    baseline: float  # the baseline's centre: exp(mean of its runs' log-centres)
    current: float  # the current runs' centre, alike
    baseline_runs: int
    current_runs: int
    # sd of a run's centre between runs: pooled over both sides (by the mean: the current
    # side's, at least the baseline's); None while unseen (one run each side)
    between_run_sd: float | None
    within_run_sd: float | None  # sd of one repeat inside a run (log scale), both sides
    run_sd: float = 0.0  # the sd of one run's centre the error rests on (between, floored)
    current_within_sd: float | None = None  # the current runs' own repeat spread, if any
    centre: Centre = "median"

    @property
    def change(self) -> float:
        """The estimated relative change, ``current / baseline - 1``."""
        return math.expm1(self.log_change)

    @property
    def between_seen(self) -> bool:
        """Whether any side has two runs, so the spread between launches was measured."""
        return self.between_run_sd is not None


def clean_runs(runs: Sequence[Sequence[float]]) -> list[list[float]]:
    """The log of every positive, finite value, per run; runs left empty are dropped.

    A metric that could not be measured in a repeat (an accept length without verify
    passes is NaN) leaves that repeat out rather than poisoning the run.
    """
    cleaned = [[math.log(v) for v in run if math.isfinite(v) and v > 0] for run in runs]
    return [run for run in cleaned if run]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _classical_sd(groups: Sequence[Sequence[float]]) -> float | None:
    """The pooled sample sd of the values around their own group's mean; None if no pairs."""
    squares = sum(sum((v - _mean(g)) ** 2 for v in g) for g in groups)
    df = sum(len(g) - 1 for g in groups)
    return math.sqrt(squares / df) if df > 0 else None


def _robust_sd(groups: Sequence[Sequence[float]]) -> float | None:
    pooled = pooled_pairwise_sd(groups)
    return pooled[0] if pooled else None


@dataclass(frozen=True)
class _Summary:
    """How one run becomes one value, and what its repeats imply for that value's variance."""

    centre: Callable[[Sequence[float]], float]
    spread: Callable[[Sequence[Sequence[float]]], float | None]  # a run's own repeat sd
    variance_factor: Callable[[int], float]  # variance of the centre of n draws, per draw's


_SUMMARIES: dict[str, _Summary] = {
    # The median ignores a slow repeat or two; the robust spread ignores them as well.
    "median": _Summary(median, _robust_sd, median_variance_factor),
    # The mean counts every repeat; the sample sd counts every repeat's distance too.
    "mean": _Summary(_mean, _classical_sd, lambda n: 1.0 / n),
}


def estimate_change(
    baseline_runs: Sequence[Sequence[float]],
    current_runs: Sequence[Sequence[float]],
    *,
    centre: Centre = "median",
    direction: Direction | None = None,
) -> ChangeEstimate | None:
    """Estimate the relative change of the current runs against the baseline runs.

    Parameters
    ----------
    baseline_runs, current_runs
        Per run (a fresh server launch), the metric's value for each repeat.
    centre
        How a run is summarised: ``"median"`` of its repeats (one or two slow repeats of five
        do not move it) or ``"mean"`` (a share of slow repeats moves it by their cost).
    direction
        The metric's direction, which says which repeats are slow. Given, a run's median
        is that of the bulk of its repeats (those within :func:`outlier_reach` of each
        other; the fastest such group when no group is the largest), so that two slow
        repeats of three do not make the run slow. None keeps every repeat.

    Returns
    -------
    ChangeEstimate or None
        None when either side holds no positive, finite value.

    Notes
    -----
    By the median, both sides are taken to scatter alike between runs: the variance of a
    run's value is the pooled sample variance of the run values around their side's mean
    (``K + m - 2`` degrees of freedom for ``K`` baseline and ``m`` current runs). By the mean,
    which is judged when the current runs' repeats are distributed unlike the baseline's
    (perfgate.gate.tail), each side's runs scatter as they do, never less than the baseline's
    (Welch's test, with Satterthwaite's degrees of freedom): two current runs that happen to
    share a slow repeat or two do not borrow the baseline's calm.

    Either way a run's variance is never less than what the noise of the repeats (a robust
    spread, pooled over every run, at least :data:`MIN_SPREAD`) implies for that many
    repeats: a baseline whose few runs agree by chance does not make the gate overconfident.
    A lone current run whose own repeats scatter significantly more than the baseline's adds
    that excess to its own variance in ``se``, the error a regression is claimed by: nothing
    else shows how far such a run may sit from its server's usual value, and a run slow by
    the chance of its scattered repeats is no regression. ``pass_se`` leaves the excess out,
    for a pass where the excess comes from a few slow repeats that the mean is judged on
    (perfgate.gate.evidence). With one run on each side the spread between launches is unseen
    (``between_run_sd`` is None) and the repeats are all there is.
    """
    base, cur = clean_runs(baseline_runs), clean_runs(current_runs)
    if not base or not cur:
        return None
    summary = _SUMMARIES[centre]
    noise = _robust_sd([*base, *cur])
    base_kept, cur_kept = base, cur  # the repeats each run's centre is taken from
    if centre == "median" and direction is not None:
        # The bulk of each run: a repeat its median leaves out widens no lone run's spread.
        reach = outlier_reach(noise)
        base_kept = [_bulk_of(direction, reach, r) for r in base]
        cur_kept = [_bulk_of(direction, reach, r) for r in cur]
    base_values = [summary.centre(r) for r in base_kept]
    cur_values = [summary.centre(r) for r in cur_kept]
    repeats = int(median([len(r) for r in (*base, *cur)]))
    floor = max(noise or 0.0, MIN_SPREAD) ** 2 * summary.variance_factor(repeats)
    if noise is None and len(base) + len(cur) < 3:
        floor = math.inf  # one value each side: nothing tells how noisy the metric is
    model = _pooled if centre == "median" else _separate
    spread = model(base_values, cur_values, floor)
    within_df = float(max(sum(len(r) - 1 for r in (*base, *cur)), 1))
    excess = _excess(summary, base, cur_kept) if len(cur) == 1 else 0.0
    shared_var = spread.baseline / len(base) + spread.current / len(cur)
    return ChangeEstimate(
        log_change=_mean(cur_values) - _mean(base_values),
        se=math.sqrt(shared_var + excess),
        pass_se=math.sqrt(shared_var),
        df=spread.df if spread.df is not None else within_df,  # one run each side
        baseline=math.exp(_mean(base_values)),
        current=math.exp(_mean(cur_values)),
        baseline_runs=len(base),
        current_runs=len(cur),
        between_run_sd=spread.between_sd,
        within_run_sd=noise,
        run_sd=math.sqrt(spread.current),
        current_within_sd=summary.spread(cur),
        centre=centre,
    )


def outlier_reach(noise: float | None) -> float:
    """How far apart (log scale) the repeats of one bulk may lie: see median_of_bulk.

    ``noise`` is the robust spread of a repeat within its run, pooled over every run (None
    when no run has two repeats): :data:`OUTLIER_SPREADS` of it, at least of MIN_SPREAD.
    """
    return OUTLIER_SPREADS * max(noise or 0.0, MIN_SPREAD)


def _bulk_of(direction: Direction, reach: float, run: Sequence[float]) -> list[float]:
    """The repeats of a run that its median keeps: stats.bulk on the goodness scale, so that
    of groups of equal size the best stands for the run (see stats.median_of_bulk)."""
    sign = 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0
    return [sign * v for v in bulk([sign * v for v in run], reach)]


@dataclass(frozen=True)
class _Spread:
    """The variance of one run's value on each side, and the degrees of freedom behind it.

    ``df`` is None when neither side has two runs; ``between_sd`` is the measured spread
    between runs (None then too).
    """

    baseline: float
    current: float
    df: float | None
    between_sd: float | None


def _squares(values: Sequence[float]) -> float:
    centre = _mean(values)
    return sum((v - centre) ** 2 for v in values)


def _pooled(base: Sequence[float], cur: Sequence[float], floor: float) -> _Spread:
    """Both sides scatter alike: one variance, pooled over both, at least ``floor``."""
    df = len(base) + len(cur) - 2
    if df < 1:
        return _Spread(floor, floor, None, None)
    between = (_squares(base) + _squares(cur)) / df
    variance = max(between, floor)
    return _Spread(variance, variance, float(df), math.sqrt(between))


def _separate(base: Sequence[float], cur: Sequence[float], floor: float) -> _Spread:
    """Each side scatters as it does, the current runs no less than the baseline's (Welch).

    A side of one run has no spread of its own and borrows the other side's.
    """
    if len(base) + len(cur) < 3:
        return _Spread(floor, floor, None, None)
    base_df, cur_df = len(base) - 1, len(cur) - 1
    base_own = _squares(base) / base_df if base_df else None
    cur_own = _squares(cur) / cur_df if cur_df else None
    base_var = max(base_own if base_own is not None else cur_own or 0.0, floor)
    cur_var = max(cur_own if cur_own is not None else 0.0, base_var)
    # Satterthwaite: each side's part of the variance counts with the degrees of freedom of
    # the estimate it came from.
    base_part_df = base_df or cur_df
    cur_part_df = cur_df if cur_own is not None and cur_own >= base_var else base_part_df
    a, b = base_var / len(base), cur_var / len(cur)
    df = (a + b) ** 2 / (a**2 / base_part_df + b**2 / cur_part_df)
    return _Spread(base_var, cur_var, df, math.sqrt(cur_var))


def _excess(summary: _Summary, base: list[list[float]], cur: list[list[float]]) -> float:
    """How much more variance a lone current run's repeats imply than the baseline's do.

    A current run of three repeats 90, 96 and 99 against a baseline that repeats 100 exactly
    is no certain -4%: its own scatter, however few its pairs, says how far its centre may
    sit from where its server usually runs. Zero unless the run scatters significantly more
    than the baseline's runs (an F-test at :data:`EXCESS_LEVEL`).
    """
    own = summary.spread(cur)
    if own is None:
        return 0.0
    own, usual = max(own, MIN_SPREAD), max(summary.spread(base) or 0.0, MIN_SPREAD)
    own_df = len(cur[0]) - 1
    usual_df = max(sum(len(r) - 1 for r in base), 1)
    if f_sf(own**2 / usual**2, own_df, usual_df) > EXCESS_LEVEL:
        return 0.0
    return (own**2 - usual**2) * summary.variance_factor(len(cur[0]))
