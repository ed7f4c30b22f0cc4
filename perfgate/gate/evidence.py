"""What a metric's runs say: the change by median and by mean, the slow tail, nothing produced.

perfgate.gate.judge decides each metric from this evidence: the median decides, unless the
current runs have a slow tail (perfgate.gate.tail), when the mean must agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfgate.gate.estimate import ChangeEstimate, clean_runs, estimate_change, outlier_reach
from perfgate.gate.interval import Judgement, decide, p_regression, tolerance_bounds
from perfgate.gate.tail import SlowTail, slow_tail
from perfgate.gate.verdict import Status
from perfgate.metrics import Direction

# The share of a metric's alpha its mean test gets when the current runs have a slow tail and
# the mean is judged too, by look; the median test gets the rest. Without a slow tail the
# median test is the only one and gets all of it: the tail test looks at how repeats fall
# around their own run's median, which (on normal noise) is independent of where the medians
# lie, and the look is fixed before any data, so choosing the split by them keeps the
# metric's chance of a false claim within its level. The first and the last look give the
# mean this share; a look between them gives it MIDDLE_MEAN_SHARE. At the first look one
# current run's mean carries its own repeats' scatter and rarely decides anything, while the
# median decides whatever moves every repeat; from the second look a slow share of repeats
# shows on the mean of two runs, which the median does not see at all (with MIDDLE_MEAN_SHARE
# alone the runs per verdict of a slow share fell from 1.78 to 1.74, 1000 trials per cell:
# rule C of benchmarks/results/gate-quality.md).
MEAN_SHARE = 0.3
MIDDLE_MEAN_SHARE = 0.9
# Metrics that are zero, or not measured at all, when the server produced nothing.
PRODUCED = frozenset({"output_tok_s", "speedup"})


@dataclass(frozen=True)
class Evidence:
    """What the runs say about one metric: the change by median and by mean, and the tail."""

    by_median: ChangeEstimate
    by_mean: ChangeEstimate
    tail: SlowTail
    direction: Direction
    tolerance: float
    mean_share: float  # the mean test's share of the metric's alpha at this look, if judged

    @property
    def p_regression(self) -> float:
        """The metric's p-value: its tests' p-values over their shares of alpha, the least.

        Without a slow tail the median is the only test, at the whole level.

        Rejecting when this is at most the metric's level rejects exactly when one of its
        tests rejects at its share, so Holm's procedure can order the metrics by it.
        """
        p = p_regression(self.by_median, self.direction, self.tolerance)
        if self.tail.heavier:
            by_mean = p_regression(self.by_mean, self.direction, self.tolerance)
            p = min(p / self.median_share, by_mean / self.mean_share)
        return min(p, 1.0)

    @property
    def median_share(self) -> float:
        """The share of the metric's alpha its median test gets: all of it, without a tail."""
        return 1.0 - self.mean_share if self.tail.heavier else 1.0


def mean_share(look: int, max_runs: int) -> float:
    """The share of a metric's alpha its mean test gets at look ``look`` of ``max_runs``.

    Only where the current runs have a slow tail; see :data:`MEAN_SHARE`.

    >>> [mean_share(k, 3) for k in (1, 2, 3)]
    [0.3, 0.9, 0.3]
    """
    return MIDDLE_MEAN_SHARE if 1 < look < max_runs else MEAN_SHARE


def gather_evidence(
    baseline_runs: Sequence[Sequence[float]],
    current_runs: Sequence[Sequence[float]],
    direction: Direction,
    tolerance: float,
    *,
    look: int = 1,
    max_runs: int = 1,
) -> Evidence | None:
    """Both estimates and the slow-tail test for one metric; None without usable samples.

    ``look`` of ``max_runs`` sets how the metric's alpha is split if the mean is judged.
    """
    by_median = estimate_change(baseline_runs, current_runs, direction=direction)
    by_mean = estimate_change(baseline_runs, current_runs, centre="mean")
    if by_median is None or by_mean is None:
        return None
    worst, _ = tolerance_bounds(direction, tolerance)
    sign = 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0
    tail = slow_tail(
        [[sign * v for v in run] for run in clean_runs(baseline_runs)],
        [[sign * v for v in run] for run in clean_runs(current_runs)],
        worst,
        outlier_reach(by_median.within_run_sd),
    )
    return Evidence(by_median, by_mean, tail, direction, tolerance, mean_share(look, max_runs))


def decide_evidence(evidence: Evidence, *, alpha: float, beta: float) -> Judgement:
    """Decide one metric at its level ``alpha`` (after Holm) and this look's ``beta``.

    The median decides, unless the current runs have a slow tail: then a regression of
    either the median or the mean is a regression, and a pass needs both within the
    tolerance (the mean's interval is reported, since it is the one the tail moved).

    With a slow tail, a lone current run's excess spread (perfgate.gate.estimate) comes from
    its repeats far behind its centre, which the mean counts at their full cost: it still
    widens both tests' regression bounds, but not their pass bounds, so a run with one stray
    slow repeat of three can pass at once instead of costing another run. Without a slow
    tail the excess is the scatter of the whole run, as when a change scatters every repeat
    it slows, and the pass bound keeps it: passing such a run on the baseline's calm would
    pass a change at the tolerance more often than ``beta`` (benchmarks/gate_quality.py,
    ``slower and scattered``).
    """
    e = evidence
    median = decide(
        e.by_median,
        e.direction,
        e.tolerance,
        alpha=alpha * e.median_share,
        beta=beta,
        final=False,
        pass_with_excess=not e.tail.heavier,
    )
    chosen = median
    if e.tail.heavier and median.status is not Status.REGRESSION:
        mean = decide(
            e.by_mean,
            e.direction,
            e.tolerance,
            alpha=alpha * e.mean_share,
            beta=beta,
            final=False,
            pass_with_excess=False,
        )
        chosen = replace(mean, status=_both(median.status, mean.status))
    return replace(chosen, p_regression=e.p_regression, alpha=alpha, tail=e.tail)


def _both(median: Status, mean: Status) -> Status:
    """The status when the median and the mean must agree (the mean's regression wins)."""
    if Status.REGRESSION in (median, mean):
        return Status.REGRESSION
    if Status.INCONCLUSIVE in (median, mean):
        return Status.INCONCLUSIVE
    if median is mean is Status.IMPROVEMENT:
        return Status.IMPROVEMENT
    return Status.PASS


def produced_nothing(metric: str, runs: Sequence[Sequence[float]]) -> str | None:
    """Why a throughput metric says the server produced nothing; None if it produced.

    A throughput that is zero, negative or missing (NaN, or no value at all) in any current
    repeat is no noisy sample: that repeat generated nothing, and the run is a regression.

    >>> produced_nothing("output_tok_s", [[0.0, 0.0, 0.0, 100.0, 100.0]])
    'the server produced nothing in 3 of 5 repeats (output_tok_s 0, 0, 0)'
    >>> produced_nothing("output_tok_s", [])
    'the server produced nothing: no output_tok_s was measured'
    """
    if metric not in PRODUCED:
        return None
    values = [v for run in runs for v in run]
    if not values:
        return f"the server produced nothing: no {metric} was measured"
    empty = [v for v in values if not (math.isfinite(v) and v > 0)]
    if not empty:
        return None
    shown = ", ".join(f"{v:g}" for v in empty[:3]) + (", ..." if len(empty) > 3 else "")
    return (
        f"the server produced nothing in {len(empty)} of {len(values)} repeats ({metric} {shown})"
    )
