"""How much did a metric change? Runs of repeats in, a relative change with its error out.

The noise model (two levels, on the log scale, where a slowdown of 3% is a shift of
log(0.97) whatever the metric's size)::

    log x[run j, repeat i] = log mu + b_j + e_ij

``b_j`` is the shift a fresh server launch brings (clocks, NCCL's choices, memory layout,
a neighbour): it is shared by every repeat of that run. ``e_ij`` is the repeat-to-repeat
noise inside one run. On GPU runners the spread of ``b`` is often larger than that of ``e``,
so a test that uses only the repeats (Bencher's per-sample t-test, asv's Mann-Whitney) sees
"significant" differences between any two launches. This estimator uses each run's median
repeat as that run's value, so the spread between runs is what sets the error, with the
spread of the repeats as a floor under it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.gate.stats import median, median_variance_factor, pooled_pairwise_sd

# The current runs' own repeat spread needs this many within-run pairs to be trusted apart
# from the pooled spread (one run of five repeats gives ten).
MIN_OWN_PAIRS = 10


@dataclass(frozen=True)
class ChangeEstimate:
    """What the runs say about a metric's relative change, before any decision.

    ``log_change`` is the mean of the current runs' log-medians minus the baseline runs'; a
    value of log(0.95) means the current runs sit 5% below the baseline. ``se`` is its
    standard error and ``df`` the degrees of freedom behind ``se`` (Student's t applies).
    ``se`` is ``inf`` when nothing tells how noisy the metric is (one run of one repeat on
    each side): no decision can then be made.
    """

    log_change: float
    se: float
    df: float
    baseline: float  # the baseline's centre: exp(mean of its runs' log-medians)
    current: float  # the current runs' centre, alike
    baseline_runs: int
    current_runs: int
    between_run_sd: float | None  # sd of a run's log-median, pooled over both sides
    within_run_sd: float | None  # robust sd of one repeat inside a run (log scale)

    @property
    def change(self) -> float:
        """The estimated relative change, ``current / baseline - 1``."""
        return math.expm1(self.log_change)


def clean_runs(runs: Sequence[Sequence[float]]) -> list[list[float]]:
    """The log of every positive, finite value, per run; runs left empty are dropped.

    A metric that could not be measured in a repeat (an accept length without verify
    passes is NaN) leaves that repeat out rather than poisoning the run.
    """
    cleaned = [[math.log(v) for v in run if math.isfinite(v) and v > 0] for run in runs]
    return [run for run in cleaned if run]


def estimate_change(
    baseline_runs: Sequence[Sequence[float]], current_runs: Sequence[Sequence[float]]
) -> ChangeEstimate | None:
    """Estimate the relative change of the current runs against the baseline runs.

    Parameters
    ----------
    baseline_runs, current_runs
        Per run (a fresh server launch), the metric's value for each repeat.

    Returns
    -------
    ChangeEstimate or None
        None when either side holds no positive, finite value.

    Notes
    -----
    Each run is summarised by the median of its repeats, so one or two slow repeats of five
    do not move it. The variance of a run's value is the pooled sample variance of the run
    medians around their side's mean (``K + m - 2`` degrees of freedom for ``K`` baseline and
    ``m`` current runs), but never less than what the repeats inside the runs imply for a
    median of that many repeats: a baseline whose few runs agree by chance does not make the
    gate overconfident. With one run on each side the repeats are all there is, and the
    estimate says so (``between_run_sd`` is None).
    """
    base, cur = clean_runs(baseline_runs), clean_runs(current_runs)
    if not base or not cur:
        return None
    base_centres, cur_centres = [median(r) for r in base], [median(r) for r in cur]
    base_mean = sum(base_centres) / len(base_centres)
    cur_mean = sum(cur_centres) / len(cur_centres)
    squares = sum((c - base_mean) ** 2 for c in base_centres)
    squares += sum((c - cur_mean) ** 2 for c in cur_centres)
    between_df = len(base) + len(cur) - 2
    within = pooled_pairwise_sd([*base, *cur])
    floor = _median_floor(base, cur)
    if between_df >= 1:
        variance, df = max(squares / between_df, floor), float(between_df)
    elif within is not None:
        # One run each side: the repeats are all there is. A spread of 0 (a metric that is
        # the same in every repeat, like the accept length of a deterministic engine) gives
        # an exact estimate.
        variance, df = floor, float(sum(len(r) - 1 for r in (*base, *cur)))
    else:
        variance, df = math.inf, 1.0
    return ChangeEstimate(
        log_change=cur_mean - base_mean,
        se=math.sqrt(variance * (1.0 / len(base) + 1.0 / len(cur))),
        df=df,
        baseline=math.exp(base_mean),
        current=math.exp(cur_mean),
        baseline_runs=len(base),
        current_runs=len(cur),
        between_run_sd=math.sqrt(squares / between_df) if between_df >= 1 else None,
        within_run_sd=within[0] if within else None,
    )


def _median_floor(base: list[list[float]], cur: list[list[float]]) -> float:
    """The least variance a run's median can have, given the spread of the repeats.

    The spread is pooled over every run. The current runs' own spread counts too when it
    rests on enough pairs (two runs of three repeats do not): a current run whose repeats
    scatter far more than usual (three slow repeats of five, say) then widens the interval
    and asks for another run instead of being trusted alone.
    """
    pooled = pooled_pairwise_sd([*base, *cur])
    if pooled is None:
        return 0.0
    spread = pooled[0]
    own = pooled_pairwise_sd(cur)
    if own is not None and own[1] >= MIN_OWN_PAIRS:
        spread = max(spread, own[0])
    repeats = int(median([len(r) for r in (*base, *cur)]))
    return spread**2 * median_variance_factor(repeats)
