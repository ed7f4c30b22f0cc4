"""The verdicts of measured runs against an approved baseline, with attribution. Pure.

The bridge between what perfgate records (Measurement, Baseline) and the gate's plain-value
statistics (perfgate.gate). The session uses it after each run, `perfgate gate` to judge a
recorded run again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from perfgate import gate, metrics
from perfgate.baselines import Baseline
from perfgate.fingerprint import diff_fingerprints
from perfgate.gate import Attribution, CycleProfile, Verdict
from perfgate.gate.attribution import attribute, cycle_profile
from perfgate.gate.estimate import estimate_change
from perfgate.gate.planning import RunPlan, plan_runs, single_run_plan
from perfgate.results import Measurement


def current_runs(measurements: Sequence[Measurement]) -> dict[str, list[tuple[float, ...]]]:
    """Per metric, the samples of each measured run, in run order."""
    runs: dict[str, list[tuple[float, ...]]] = {}
    for measurement in measurements:
        for metric, values in measurement.samples().items():
            runs.setdefault(metric, []).append(values)
    return runs


# What a run costs beyond its measurement (from its servers' start to its end): the pytest
# session's start, judging, recording. On an H200 a run of the GPU scenario took 48-56 s of
# runner time, its two servers 46 (benchmarks/results/h200-real-weights.md, fifth section).
RUN_OVERHEAD_S = 10.0


def runner_s(measurements: Sequence[Measurement]) -> float:
    """The runner time the runs took, in seconds: each from its start to its end."""
    return sum(max((m.finished_at - m.started_at).total_seconds(), 0.0) for m in measurements)


def plan_verdict(
    first: Measurement,
    baseline: Baseline,
    *,
    alpha: float = gate.DEFAULT_ALPHA,
    max_runs: int = 1,
    budget_s: float | None = None,
) -> RunPlan:
    """The runs a verdict of ``first``'s scenario takes against ``baseline``, planned from the
    approved runs' spread (perfgate.gate.planning): at most ``max_runs`` runs, and no more
    than ``budget_s`` of runner time allows at what the ``first`` run took (with
    RUN_OVERHEAD_S a run for what its measurement does not time).

    A run whose environment differs from the baseline's is judged once: its verdicts are
    incomparable whatever else is measured.
    """
    if max_runs <= 1 or diff_fingerprints(baseline.fingerprint, first.fingerprint):
        return single_run_plan(1)
    took = runner_s([first])
    budget = None
    if budget_s is not None and took > 0:
        budget = max(math.floor(budget_s / (took + RUN_OVERHEAD_S)), 1)
    return plan_runs(
        baseline.metric_runs(),
        baseline.tolerances,
        baseline.gated,
        alpha=alpha,
        beta=gate.DEFAULT_BETA,
        max_runs=max_runs,
        budget_runs=budget,
    )


def judge_look(
    measurements: Sequence[Measurement],
    baseline: Baseline,
    *,
    alpha: float = gate.DEFAULT_ALPHA,
    max_runs: int = 1,
    first_runs: int = 1,
) -> gate.Look:
    """The gate's look at one scenario's runs against its baseline: verdicts, and whether
    another run can change them.

    ``measurements`` are the runs of one verdict (the first, and any measured again while
    it was inconclusive): the look is the ``len(measurements)``-th of at most ``max_runs``,
    and spends its share of ``alpha``, this scenario's share of the session's false-alarm
    level (see perfgate.gate.looks); the first look judged ``first_runs`` runs (see
    :func:`plan_verdict`). A run whose environment differs from the baseline's
    makes every verdict ``incomparable``, naming the fields, and asks for no other run.
    Throughput verdicts carry an :class:`~perfgate.gate.Attribution` when both sides have
    phase timings; every verdict the runner time of its runs.
    """
    for measurement in measurements:
        differences = diff_fingerprints(baseline.fingerprint, measurement.fingerprint)
        if differences:
            verdicts = gate.incomparable(baseline.gated, differences)
            return gate.Look(verdicts, len(measurements), max_runs, another_run=False)
    look = gate.judge_look(
        baseline.metric_runs(),
        current_runs(measurements),
        baseline.tolerances,
        baseline.gated,
        alpha=alpha,
        max_runs=max_runs,
        first_runs=first_runs,
    )
    took = runner_s(measurements)
    verdicts = [
        replace(
            v,
            runner_s=took,
            attribution=explain(v.metric, v.change, measurements, baseline)
            if v.metric in metrics.EXPLAINED and v.change is not None
            else v.attribution,
        )
        for v in look.verdicts
    ]
    return replace(look, verdicts=verdicts)


def judge_measurements(
    measurements: Sequence[Measurement],
    baseline: Baseline,
    *,
    alpha: float = gate.DEFAULT_ALPHA,
    max_runs: int = 1,
    first_runs: int = 1,
) -> list[Verdict]:
    """The gate's verdicts for one scenario's runs against its baseline (see judge_look)."""
    look = judge_look(measurements, baseline, alpha=alpha, max_runs=max_runs, first_runs=first_runs)
    return look.verdicts


def explain(
    metric: str, change: float, measurements: Sequence[Measurement], baseline: Baseline
) -> Attribution | None:
    """Attribute a throughput change to the cycle's phases; None without phase timings."""
    before = baseline_profile(baseline)
    after = measured_profile(measurements)
    if before is None or after is None:
        return None
    tok_s_change = None
    if metric == "speedup":
        spec = estimate_change(
            baseline.metric_runs().get("output_tok_s", []),
            current_runs(measurements).get("output_tok_s", []),
        )
        if spec is not None:
            plain = (1.0 + spec.change) / (1.0 + change) - 1.0
            tok_s_change = (spec.change, plain)
    return attribute(metric, change, before, after, tok_s_change)


def baseline_profile(baseline: Baseline) -> CycleProfile | None:
    """Where the baseline runs' decode cycle went; None if they hold no phase means."""
    plain = [run[metrics.CYCLE] for run in baseline.phase_runs("plain") if metrics.CYCLE in run]
    return cycle_profile(
        baseline.phase_runs("spec"), baseline.metric_runs().get("accept_length", []), plain
    )


def measured_profile(measurements: Sequence[Measurement]) -> CycleProfile | None:
    """Where the measured runs' decode cycle went; None without probe timings."""
    plain = [m.plain.phase_ms().get(metrics.CYCLE, ()) for m in measurements]
    return cycle_profile(
        [m.spec.phase_ms() for m in measurements],
        [m.samples().get("accept_length", ()) for m in measurements],
        plain,
    )
