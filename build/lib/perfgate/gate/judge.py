"""The gate: baseline samples and a run's samples in, verdicts out. Pure: no I/O.

The rule decides "worse than the baseline by more than the tolerance", not "different": a
metric passes when its relative change stays inside the tolerance the team approved.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from perfgate.gate.verdict import Status, Verdict
from perfgate.metrics import METRICS, Direction

DEFAULT_TOLERANCE = 0.03


def judge_metric(
    metric: str,
    baseline_runs: Sequence[Sequence[float]],
    current: Sequence[float],
    tolerance: float,
) -> Verdict:
    """Judge one metric: the median of the current samples against the baseline's.

    The baseline's centre is the median of its runs' medians, so one odd approved run moves
    it little. ``change`` is ``current / baseline - 1``; the verdict is ``regression`` when
    the change is worse than ``tolerance`` in the metric's bad direction, ``improvement``
    when it is better by more than ``tolerance``, and ``pass`` otherwise.

    >>> judge_metric("output_tok_s", [[100, 101], [99, 100]], [90, 91, 89], 0.05).status.value
    'regression'
    """
    runs = [r for r in baseline_runs if len(r)]
    if not runs or not current:
        return Verdict(metric, Status.ERROR, "no samples to compare", tolerance=tolerance)
    base = statistics.median(statistics.median(r) for r in runs)
    now = statistics.median(current)
    if base == 0:
        return Verdict(metric, Status.ERROR, "the baseline is 0", tolerance=tolerance)
    change = now / base - 1.0
    better = change if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else -change
    if better < -tolerance:
        status = Status.REGRESSION
    elif better > tolerance:
        status = Status.IMPROVEMENT
    else:
        status = Status.PASS
    message = f"{change:+.1%} against a tolerance of {tolerance:.0%}"
    return Verdict(metric, status, message, base, now, change, tolerance=tolerance)


def judge_samples(
    samples: Mapping[str, Sequence[float]],
    baseline_runs: Mapping[str, Sequence[Sequence[float]]],
    tolerances: Mapping[str, float],
    gated: Sequence[str],
) -> list[Verdict]:
    """Judge every gated metric of a run."""
    verdicts = []
    for metric in gated:
        tolerance = tolerances.get(metric, DEFAULT_TOLERANCE)
        if metric not in samples:
            verdicts.append(Verdict(metric, Status.ERROR, "not measured", tolerance=tolerance))
        elif not baseline_runs.get(metric):
            verdicts.append(
                Verdict(metric, Status.ERROR, "the baseline has no samples", tolerance=tolerance)
            )
        else:
            verdicts.append(judge_metric(metric, baseline_runs[metric], samples[metric], tolerance))
    return verdicts


def incomparable(
    gated: Sequence[str], differences: Sequence[tuple[str, str | None, str | None]]
) -> list[Verdict]:
    """Verdicts for a run whose environment differs from the baseline's, naming the fields."""
    fields = ", ".join(f"{name} ({old} -> {new})" for name, old, new in differences)
    message = f"environment differs from the baseline's: {fields}"
    return [Verdict(metric, Status.INCOMPARABLE, message) for metric in gated]
