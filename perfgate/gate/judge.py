"""The gate: baseline runs and current runs in, verdicts out. Pure: no I/O.

The gate decides "worse than the baseline by more than the tolerance", not "different".
Each metric's change gets an interval; where that interval lies against the tolerance
decides (for a metric where higher is better and a 3% tolerance)::

    interval wholly below -3% ............................ regression
    interval wholly above -3% ............................ pass (improvement if above +3%)
    interval across -3% .................................. inconclusive

The interval's upper end is a one-sided bound at level ``alpha``, so a regression is claimed
only when the data are confident the change is *beyond* the tolerance; its lower end is a
one-sided bound at level ``beta``, so a pass is claimed only when the data are confident the
change is *within* it. Nothing else decides: an interval across the tolerance is
``inconclusive`` at every look, the last one included.

Each run is summarised by the median of its repeats, which one or two slow repeats of five do
not move; repeats far outside the bulk of their run (20 times the repeat noise away) are
left out of it, so two slow repeats of three do not make the run slow either. A change that
makes a share of the repeats slow leaves the median in place, so a second test watches the
distribution (perfgate.gate.tail): when the current runs have significantly more repeats
far behind their run's centre than the baseline's, the mean of the repeats is judged as
well, and a pass needs both the median and the mean within the tolerance. A metric's
``alpha`` is split between its two tests only when both are run (a slow tail); otherwise
the median test has all of it (perfgate.gate.evidence).

What the levels mean, exactly (under the model of perfgate.gate.estimate: normal noise on
the log scale, run shifts and repeat noise independent):

* ``alpha`` bounds the chance that the gate flags any gated metric of a scenario as a
  regression while every metric's true change is within its tolerance, over the whole loop
  of looks: it is spent over the looks (perfgate.gate.looks), split by Holm's step-down
  procedure (Holm 1979) among the gated metrics at each look, whatever the correlation
  between them, and split between a metric's median and mean tests when the slow tail calls
  for the mean. The bound is for the worst case, every change sitting exactly at its
  tolerance; at no change the chance is far smaller. Several scenarios of a session share
  the session's ``alpha`` equally.
* ``beta`` bounds the chance, over all looks, that a metric whose true change sits exactly at
  the tolerance is passed (0.2 by default); at twice the tolerance a pass is rare.

A metric is judged only once the spread between server launches has been seen (two runs on
some side): with one approved run and one current run, neither a pass nor a regression is
claimed, since the repeats of one launch say nothing of how far the next launch lands. A
throughput of zero, below zero or missing in the current runs is no sample to drop: the
server produced nothing, and that is a regression, whatever the statistics.

What these rules cost and deliver (false alarms, detection, runs per verdict, over noise
shapes from quiet to heavy-tailed, with restarts noisier than repeats, with slow repeats) is
measured by ``benchmarks/gate_quality.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from perfgate.gate.estimate import ChangeEstimate
from perfgate.gate.evidence import (
    Evidence,
    decide_evidence,
    gather_evidence,
    mean_share,
    produced_nothing,
)
from perfgate.gate.interval import (
    DEFAULT_BETA,
    Judgement,
    decide,
    goodness,
    p_regression,
    tolerance_bounds,
)
from perfgate.gate.looks import look_levels, looks_of, min_settle_chance, settle_chance
from perfgate.gate.verdict import Status, Verdict
from perfgate.metrics import METRICS
from perfgate.spec.document import DEFAULT_ALPHA

__all__ = [  # what other modules import from here
    "DEFAULT_ALPHA",
    "DEFAULT_BETA",
    "DEFAULT_TOLERANCE",
    "Judgement",
    "Look",
    "decide",
    "holm_levels",
    "incomparable",
    "judge_look",
    "judge_metric",
    "judge_runs",
    "p_regression",
    "tolerance_bounds",
]

DEFAULT_TOLERANCE = 0.03
# DEFAULT_ALPHA: family-wise, per scenario, over all looks, at the tolerance (see above).
# With fewer approved runs than this the spread between launches is barely known.
FEW_BASELINE_RUNS = 3


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


@dataclass(frozen=True)
class Look:
    """The verdicts of one look at a scenario's runs, and whether to measure another run.

    ``number`` is how many current runs were judged, of at most ``max_runs``; the first look
    judged ``first_runs`` of them, and each look after it ``first_runs`` more (the last one
    what is left), so another look means measuring :attr:`next_runs` in all. ``another_run``
    is True only where another run can change the outcome:
    runs are left, no metric is already a regression (that fixes the scenario's status),
    and some inconclusive metric could still be settled (see perfgate.gate.looks).
    """

    verdicts: list[Verdict]
    number: int
    max_runs: int
    another_run: bool
    first_runs: int = 1  # the runs of the first look (perfgate.gate.planning)

    @property
    def next_runs(self) -> int:
        """The runs the next look judges: a group of ``first_runs`` more, within the budget."""
        return min(self.number + self.first_runs, self.max_runs)


def judge_look(
    baseline: Mapping[str, Sequence[Sequence[float]]],
    current: Mapping[str, Sequence[Sequence[float]]],
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    max_runs: int = 1,
    first_runs: int = 1,
) -> Look:
    """Judge every gated metric of a scenario, as one family, at one look.

    Parameters
    ----------
    baseline
        Per metric, per approved run (a fresh server launch), the value of each repeat.
    current
        Per metric, per run of the change under test, the value of each repeat: one run,
        or several when earlier looks were inconclusive. Their number is the look's.
    tolerances
        Per metric, the largest change the team accepts as "the same" (0.03 is 3%);
        :data:`DEFAULT_TOLERANCE` for a metric not named.
    gated
        The metrics to judge. Each gets one verdict, in this order.
    alpha, beta
        The scenario's false-alarm level (over every look and metric) and the chance of
        passing a change at the tolerance (over every look), as in the module's description.
    max_runs
        The run budget. 1 judges the runs given once and for all.
    first_runs
        The runs the first look judges (perfgate.gate.planning plans them); each later look
        judges as many more (the last what is left of ``max_runs``), so ``alpha`` and
        ``beta`` are spent over :func:`looks_of` looks. With 1, every run is a look.

    Returns
    -------
    Look
        ``regression``, ``improvement``, ``pass`` or ``inconclusive`` per metric, with the
        estimated change and its interval; ``error`` where a side has no samples; and
        whether another run is worth measuring.
    """
    number = max([len(current.get(m, ())) for m in gated] + [1])
    first_runs = min(max(first_runs, 1), max(max_runs, 1))
    looks = looks_of(max_runs, first_runs)
    look = looks_of(number, first_runs)
    look_alpha, look_beta = look_levels(alpha, beta, look, looks)
    last_alpha, last_beta = look_levels(alpha, beta, looks, looks)
    verdicts: dict[str, Verdict] = {}
    evidence: dict[str, Evidence] = {}
    for metric in gated:
        tolerance = tolerances.get(metric, DEFAULT_TOLERANCE)
        found = _unjudgeable(metric, baseline, current, tolerance, (look, looks))
        if isinstance(found, Verdict):
            verdicts[metric] = found
        else:
            evidence[metric] = found
    levels = holm_levels({m: e.p_regression for m, e in evidence.items()}, look_alpha)
    worth_another = False
    for metric, level in levels.items():
        judgement = decide_evidence(evidence[metric], alpha=level, beta=look_beta)
        last = (level * last_alpha / look_alpha, last_beta)
        judgement = _with_settle(judgement, evidence[metric], max_runs, last, looks)
        worth_another = worth_another or _worth_another_run(judgement)
        verdicts[metric] = to_verdict(metric, judgement, evidence[metric].tolerance, max_runs)
    ordered = [replace(verdicts[metric], planned_runs=first_runs) for metric in gated]
    regression = any(v.status is Status.REGRESSION for v in ordered)
    another = number < max_runs and not regression and worth_another
    return Look(ordered, number, max_runs, another, first_runs)


def _unjudgeable(
    metric: str,
    baseline: Mapping[str, Sequence[Sequence[float]]],
    current: Mapping[str, Sequence[Sequence[float]]],
    tolerance: float,
    look: tuple[int, int],
) -> Verdict | Evidence:
    """A metric's evidence, or the verdict that needs none (nothing produced, no samples).

    ``look`` is the look's number and the run budget.
    """
    runs = current.get(metric, ())
    nothing = produced_nothing(metric, runs)
    if nothing is not None:
        return Verdict(
            metric,
            Status.REGRESSION,
            nothing,
            tolerance=tolerance,
            runs=len(runs) or None,
            baseline_runs=len(baseline.get(metric, ())),
        )
    problem = _missing(metric, baseline, current)
    direction = METRICS[metric].direction
    found = None
    if not problem:
        number, max_runs = look
        found = gather_evidence(
            baseline[metric], runs, direction, tolerance, look=number, max_runs=max_runs
        )
    if found is None:
        reason = problem or "no positive, finite samples"
        return Verdict(metric, Status.ERROR, reason, tolerance=tolerance)
    return found


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


def _with_settle(
    judgement: Judgement,
    evidence: Evidence,
    max_runs: int,
    last: tuple[float, float],
    looks: int,
) -> Judgement:
    """The judgement with the chance that the remaining runs settle it, if inconclusive.

    ``last`` holds the metric's alpha and beta at the last look (the ``looks``-th, after
    ``max_runs`` runs), where the test that decided gets its share of that alpha as split at
    the last look (perfgate.gate.evidence).
    """
    if judgement.status is not Status.INCONCLUSIVE:
        return judgement
    worst, _ = tolerance_bounds(evidence.direction, evidence.tolerance)
    last_mean = mean_share(looks, looks)
    if judgement.estimate.centre == "mean":
        share = last_mean
    else:
        share = 1.0 - last_mean if evidence.tail.heavier else 1.0
    chance = settle_chance(
        judgement.estimate,
        goodness(judgement.estimate, evidence.direction),
        worst,
        max_runs=max_runs,
        alpha=last[0] * share,
        beta=last[1],
    )
    return replace(judgement, settle=chance)


def _worth_another_run(judgement: Judgement) -> bool:
    """Whether the remaining runs would settle this judgement likely enough to measure one."""
    if judgement.settle is None:
        return False
    return judgement.settle >= min_settle_chance(judgement.estimate.centre)


def judge_runs(
    baseline: Mapping[str, Sequence[Sequence[float]]],
    current: Mapping[str, Sequence[Sequence[float]]],
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    max_runs: int = 1,
) -> list[Verdict]:
    """Judge every gated metric of a scenario, as one family: :func:`judge_look`'s verdicts."""
    look = judge_look(
        baseline, current, tolerances, gated, alpha=alpha, beta=beta, max_runs=max_runs
    )
    return look.verdicts


def to_verdict(metric: str, judgement: Judgement, tolerance: float, max_runs: int = 1) -> Verdict:
    """The Verdict that reports a Judgement, with a message a person can read."""
    e = judgement.estimate
    return Verdict(
        metric=metric,
        status=judgement.status,
        message=describe(judgement, tolerance, max_runs),
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
        run_budget=max_runs,
    )


def describe(judgement: Judgement, tolerance: float, max_runs: int = 1) -> str:
    """One line: the change, its interval, the spread that set it, and what decided."""
    e = judgement.estimate
    runs = f"{e.current_runs} run{'s' if e.current_runs > 1 else ''}"
    text = (
        f"{e.change:+.1%} (interval {judgement.ci_low:+.1%} to {judgement.ci_high:+.1%}) "
        f"against a tolerance of {tolerance:.1%}; {runs} against {e.baseline_runs} approved"
    )
    if judgement.tail is not None and judgement.tail.heavier:
        text += f"; judged on the mean of the repeats too: {judgement.tail.describe(tolerance)}"
    text += "; " + _spread(e)
    if e.baseline_runs < FEW_BASELINE_RUNS:
        text += "; approve more baseline runs for sharper verdicts"
    if judgement.status is Status.INCONCLUSIVE:
        text += _undecided(judgement, max_runs)
    return text


def _spread(e: ChangeEstimate) -> str:
    """The spreads the interval rests on: between runs, and within them."""
    what = "run medians" if e.centre == "median" else "run means"
    if e.between_run_sd is None:
        text = "spread between runs unseen (one run each side)"
    else:
        text = f"spread of {what} between runs {e.between_run_sd:.1%}"
    if e.within_run_sd is not None:
        text += f", within runs {e.within_run_sd:.1%}"
    own = e.current_within_sd
    if own is not None and e.within_run_sd is not None and own > 1.5 * e.within_run_sd:
        text += f" ({own:.1%} in the current runs)"
    return text


def _undecided(judgement: Judgement, max_runs: int) -> str:
    """Why an inconclusive verdict is so, and whether another run may settle it."""
    e = judgement.estimate
    if not e.between_seen:
        reason = "; the spread between launches is unseen: to be confirmed by another run"
    else:
        reason = "; the interval crosses the tolerance"
    if e.current_runs >= max_runs:
        return reason + "; the run budget is spent"
    if judgement.settle is not None and not _worth_another_run(judgement):
        left = max_runs - e.current_runs
        return reason + (
            f"; {left} more run{'s' if left > 1 else ''} would likely not settle it "
            f"({judgement.settle:.0%} chance)"
        )
    return reason + "; another run may settle it"


def judge_metric(
    metric: str,
    baseline_runs: Sequence[Sequence[float]],
    current_runs: Sequence[Sequence[float]],
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    max_runs: int = 1,
) -> Verdict:
    """Judge one metric on its own (a family of one): see :func:`judge_look`.

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
        max_runs=max_runs,
    )
    return verdict


def incomparable(
    gated: Sequence[str], differences: Sequence[tuple[str, str | None, str | None]]
) -> list[Verdict]:
    """Verdicts for a run whose environment differs from the baseline's, naming the fields."""
    fields = ", ".join(f"{name} ({old} -> {new})" for name, old, new in differences)
    message = f"environment differs from the baseline's: {fields}"
    return [Verdict(metric, Status.INCOMPARABLE, message) for metric in gated]
