"""The gate: baseline runs and current runs in, verdicts out. Pure: no I/O.

The gate decides "worse than the baseline by more than the tolerance", not "different".
Each metric's change gets an interval; where that interval lies against the tolerance
decides (for a metric where higher is better and a 3% tolerance)::

    interval wholly below -3% ............................ regression
    interval wholly above -3% ............................ pass (improvement if above +3%)
    interval across -3% .................................. inconclusive: measure another run

The interval's upper end is a one-sided bound at level ``alpha`` (after Holm's correction
over the scenario's gated metrics), so a regression is claimed only when the data are
confident the change is *beyond* the tolerance; its lower end is a one-sided bound at level
``beta``, so a pass is claimed only when the data are confident the change is *within* it.
What the levels mean, exactly (under the model of perfgate.gate.estimate: normal noise on
the log scale, run shifts and repeat noise independent):

* ``alpha`` bounds the chance, at each look at the data, that the gate flags any gated
  metric of a scenario as a regression while every metric's true change is within its
  tolerance: the family-wise false-alarm rate, by Holm's step-down procedure (Holm 1979),
  valid whatever the correlation between the metrics. The bound is for the worst case, a
  change sitting exactly at the tolerance; at no change the chance is far smaller.
  The default 0.2 tests the strongest of four metrics at 0.05.
* ``beta`` bounds the chance that a metric whose true change sits exactly at the tolerance
  is passed (0.2 by default); at twice the tolerance a pass is rare.

When the interval crosses the tolerance the verdict is ``inconclusive`` and the runner
measures another run (a fresh server launch), up to a budget. So is a regression seen with
one run on each side before the budget is spent: the repeats alone cannot tell a slower
change from a slower launch, so another run confirms it first. On the last run
(``final=True``) an undecided metric is decided on its estimate when the estimate's standard
error is at most a third of the tolerance (the change then sits close to the tolerance,
where either verdict is fair; the message says the verdict was decided this way); a noisier
estimate stays ``inconclusive``, the honest answer when the runner is too noisy for the
tolerance. Looks and decisions on the estimate are outside the ``alpha`` bound; what they
cost, and the rates at no change, half and twice the tolerance, over noise shapes from
quiet to heavy-tailed and bimodal, are measured by ``benchmarks/gate_quality.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfgate.gate.estimate import ChangeEstimate, estimate_change
from perfgate.gate.stats import t_cdf, t_ppf
from perfgate.gate.verdict import Status, Verdict
from perfgate.metrics import METRICS, Direction

DEFAULT_TOLERANCE = 0.03
DEFAULT_ALPHA = 0.2  # family-wise, per scenario, at the tolerance (see above)
DEFAULT_BETA = 0.2  # the chance of passing a change that sits exactly at the tolerance
# On the last run, an undecided metric is decided on its estimate only when the estimate's
# standard error is at most this share of the tolerance: close enough to the truth that the
# estimate's side of the tolerance is the side the truth is on, or nearly so.
SETTLED_SE = 1.0 / 3.0
# With fewer approved runs than this the spread between launches is barely known.
FEW_BASELINE_RUNS = 3


@dataclass(frozen=True)
class Judgement:
    """One metric's decision: its status and the interval that made it.

    ``ci_low``/``ci_high`` bound the relative change (``current / baseline - 1``) in the
    metric's own terms; ``p_regression`` is the one-sided p-value of "no regression beyond
    the tolerance" (small: strong evidence of a regression); ``decided_on_estimate`` is True
    when the budget ran out and the estimate alone decided.
    """

    status: Status
    estimate: ChangeEstimate
    ci_low: float
    ci_high: float
    p_regression: float
    alpha: float
    decided_on_estimate: bool = False


def tolerance_bounds(direction: Direction, tolerance: float) -> tuple[float, float]:
    """The regression and improvement thresholds on the log-goodness scale.

    Goodness is the log change for a metric where higher is better and its negative
    otherwise, so a regression is always a goodness below the first number.
    """
    if direction is Direction.HIGHER_IS_BETTER:
        return math.log1p(-tolerance), math.log1p(tolerance)
    return -math.log1p(tolerance), -math.log1p(-tolerance)


def _goodness(estimate: ChangeEstimate, direction: Direction) -> float:
    sign = 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0
    return sign * estimate.log_change


def p_regression(estimate: ChangeEstimate, direction: Direction, tolerance: float) -> float:
    """One-sided p-value of "the change is not worse than the tolerance".

    Small values are evidence of a regression beyond the tolerance; 0.5 means the estimate
    sits exactly at the tolerance.
    """
    if math.isinf(estimate.se):
        return 1.0
    worst, _ = tolerance_bounds(direction, tolerance)
    distance = _goodness(estimate, direction) - worst
    if estimate.se == 0.0:
        return 0.0 if distance < 0 else 1.0
    return t_cdf(distance / estimate.se, estimate.df)


def decide(
    estimate: ChangeEstimate,
    direction: Direction,
    tolerance: float,
    *,
    alpha: float,
    beta: float = DEFAULT_BETA,
    final: bool = True,
) -> Judgement:
    """Decide one metric at level ``alpha`` (already corrected for the family).

    Returns a :class:`Judgement` whose interval runs from the ``beta`` lower bound to the
    ``alpha`` upper bound of the goodness, converted back to the metric's relative change.
    """
    worst, best = tolerance_bounds(direction, tolerance)
    g = _goodness(estimate, direction)
    low = g - t_ppf(1.0 - beta, estimate.df) * estimate.se  # -inf when se is inf
    high = g + t_ppf(1.0 - alpha, estimate.df) * estimate.se
    on_estimate = False
    if high < worst and (final or estimate.between_run_sd is not None):
        status = Status.REGRESSION
    elif low > best:
        status = Status.IMPROVEMENT
    elif low >= worst:
        status = Status.PASS
    elif high < worst:
        # One run each side: how far launches scatter is unknown, so a regression seen in
        # the repeats alone is confirmed by another run before it fails the build.
        status = Status.INCONCLUSIVE
    elif final and estimate.se <= -worst * SETTLED_SE:
        status, on_estimate = (Status.REGRESSION if g < worst else Status.PASS), True
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
        decided_on_estimate=on_estimate,
    )


def _to_change(low: float, high: float, direction: Direction) -> tuple[float, float]:
    """A goodness interval as an interval of the relative change, in the metric's terms."""
    if direction is Direction.HIGHER_IS_BETTER:
        return math.expm1(low), math.expm1(high)
    return math.expm1(-high), math.expm1(-low)


def holm_levels(p_values: Mapping[str, float], alpha: float) -> dict[str, float]:
    """The level each hypothesis is tested at by Holm's step-down procedure.

    Sorted by p-value, the k-th smallest (from 0) is tested at ``alpha / (N - k)`` as long as
    every smaller one was rejected; from the first one kept, all the rest are tested at that
    same level (and kept). Rejecting exactly those with ``p <= level`` controls the chance of
    rejecting any true hypothesis at ``alpha``.

    >>> holm_levels({"a": 0.001, "b": 0.02, "c": 0.4}, 0.05)
    {'a': 0.016666666666666666, 'b': 0.025, 'c': 0.05}
    >>> holm_levels({"a": 0.001, "b": 0.04, "c": 0.4}, 0.05)
    {'a': 0.016666666666666666, 'b': 0.025, 'c': 0.025}
    """
    ordered = sorted(p_values, key=lambda name: p_values[name])
    levels: dict[str, float] = {}
    stopped: float | None = None
    for rank, name in enumerate(ordered):
        level = stopped if stopped is not None else alpha / (len(ordered) - rank)
        levels[name] = level
        if stopped is None and p_values[name] > level:
            stopped = level
    return levels


def judge_runs(
    baseline: Mapping[str, Sequence[Sequence[float]]],
    current: Mapping[str, Sequence[Sequence[float]]],
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    final: bool = True,
) -> list[Verdict]:
    """Judge every gated metric of a scenario, as one family.

    Parameters
    ----------
    baseline
        Per metric, per approved run (a fresh server launch), the value of each repeat.
    current
        Per metric, per run of the change under test, the value of each repeat: one run,
        or several when earlier ones were inconclusive.
    tolerances
        Per metric, the largest change the team accepts as "the same" (0.03 is 3%);
        :data:`DEFAULT_TOLERANCE` for a metric not named.
    gated
        The metrics to judge. Each gets one verdict, in this order.
    alpha, beta, final
        As in the module's description: the family-wise false-alarm level (split by Holm's
        procedure among the gated metrics), the level of a pass claim, and whether the run
        budget is spent (so an undecided metric must be decided if it can be).

    Returns
    -------
    list of Verdict
        ``regression``, ``improvement``, ``pass`` or ``inconclusive`` per metric, with the
        estimated change and its interval; ``error`` where a side has no samples.
    """
    estimates: dict[str, ChangeEstimate] = {}
    verdicts: dict[str, Verdict] = {}
    for metric in gated:
        tolerance = tolerances.get(metric, DEFAULT_TOLERANCE)
        problem = _missing(metric, baseline, current)
        estimate = None if problem else estimate_change(baseline[metric], current[metric])
        if estimate is None:
            reason = problem or "no positive, finite samples"
            verdicts[metric] = Verdict(metric, Status.ERROR, reason, tolerance=tolerance)
        else:
            estimates[metric] = estimate
    p_values = {
        m: p_regression(e, METRICS[m].direction, tolerances.get(m, DEFAULT_TOLERANCE))
        for m, e in estimates.items()
    }
    for metric, level in holm_levels(p_values, alpha).items():
        tolerance = tolerances.get(metric, DEFAULT_TOLERANCE)
        judgement = decide(
            estimates[metric],
            METRICS[metric].direction,
            tolerance,
            alpha=level,
            beta=beta,
            final=final,
        )
        verdicts[metric] = to_verdict(metric, judgement, tolerance)
    return [verdicts[metric] for metric in gated]


def _missing(
    metric: str,
    baseline: Mapping[str, Sequence[Sequence[float]]],
    current: Mapping[str, Sequence[Sequence[float]]],
) -> str | None:
    if not any(len(run) for run in current.get(metric, ())):
        return "not measured"
    if not any(len(run) for run in baseline.get(metric, ())):
        return "the baseline has no samples"
    return None


def to_verdict(metric: str, judgement: Judgement, tolerance: float) -> Verdict:
    """The Verdict that reports a Judgement, with a message a person can read."""
    e = judgement.estimate
    return Verdict(
        metric=metric,
        status=judgement.status,
        message=describe(judgement, tolerance),
        baseline=e.baseline,
        current=e.current,
        change=e.change,
        ci_low=judgement.ci_low,
        ci_high=judgement.ci_high,
        tolerance=tolerance,
        runs=e.current_runs,
        baseline_runs=e.baseline_runs,
        p_value=judgement.p_regression,
        alpha=judgement.alpha,
    )


def describe(judgement: Judgement, tolerance: float) -> str:
    """One line: the change, its interval, the tolerance, and how much data decided."""
    e = judgement.estimate
    runs = f"{e.current_runs} run{'s' if e.current_runs > 1 else ''}"
    text = (
        f"{e.change:+.1%} (interval {judgement.ci_low:+.1%} to {judgement.ci_high:+.1%}) "
        f"against a tolerance of {tolerance:.1%}; {runs} against {e.baseline_runs} approved"
    )
    if e.between_run_sd is not None and e.within_run_sd is not None:
        text += f"; spread between runs {e.between_run_sd:.1%}, within {e.within_run_sd:.1%}"
    elif e.within_run_sd is not None:
        text += "; spread between runs unknown (one run each side)"
    if e.baseline_runs < FEW_BASELINE_RUNS:
        text += "; approve more baseline runs for sharper verdicts"
    if judgement.decided_on_estimate:
        text += "; decided on the estimate: the run budget is spent"
    elif judgement.status is Status.INCONCLUSIVE and e.between_run_sd is None:
        text += "; to be confirmed by another run"
    elif judgement.status is Status.INCONCLUSIVE:
        text += "; the interval crosses the tolerance"
    return text


def judge_metric(
    metric: str,
    baseline_runs: Sequence[Sequence[float]],
    current_runs: Sequence[Sequence[float]],
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    final: bool = True,
) -> Verdict:
    """Judge one metric on its own (a family of one): see :func:`judge_runs`.

    >>> base = [[100, 101, 99, 100, 100], [99, 100, 101, 100, 99], [101, 100, 100, 102, 101]]
    >>> judge_metric("output_tok_s", base, [[90, 91, 89, 90, 90]], 0.03).status.value
    'regression'
    >>> judge_metric("output_tok_s", base, [[100, 99, 101, 100, 100]], 0.03).status.value
    'pass'
    """
    (verdict,) = judge_runs(
        {metric: baseline_runs},
        {metric: current_runs},
        {metric: tolerance},
        [metric],
        alpha=alpha,
        beta=beta,
        final=final,
    )
    return verdict


def incomparable(
    gated: Sequence[str], differences: Sequence[tuple[str, str | None, str | None]]
) -> list[Verdict]:
    """Verdicts for a run whose environment differs from the baseline's, naming the fields."""
    fields = ", ".join(f"{name} ({old} -> {new})" for name, old, new in differences)
    message = f"environment differs from the baseline's: {fields}"
    return [Verdict(metric, Status.INCOMPARABLE, message) for metric in gated]
