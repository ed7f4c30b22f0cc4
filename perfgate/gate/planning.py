"""How many runs a verdict takes, planned from the baseline's own spread and the tolerance. Pure.

A run is a fresh launch of both servers, and on a GPU runner launches scatter far more than
the repeats of one launch: ten launches of the GPU scenario on an H200 put tok/s 2.6% apart
and speedup 4.0% (benchmarks/results/h200-real-weights.md), where verify moved 0.1%. Judged
after one launch against a tolerance near that spread, unchanged code can neither pass nor
fail: its interval crosses the tolerance, and the verdict is ``inconclusive`` however often
it is run again one launch at a time. So a verdict's first look waits for as many launches as
the baseline's spread says unchanged code needs to pass it:

    first look = the fewest runs m at which unchanged code passes the first look of every
                 gated metric at once with a chance of at least FIRST_PASS (the product of
                 each metric's chance: a scenario is inconclusive if any metric is)

where, for a metric whose approved runs' centres scatter ``s`` between launches (never less
than their repeats imply), with ``K`` approved runs and a tolerance ``T``, the first look's
interval rests on ``se = s * sqrt(1/K + 1/m)`` and a pass needs its lower bound, ``t`` of
the first look's beta below the estimate, above ``-T``: a chance of ``Phi(T / se - t)``
at no change. Each later look adds as many runs again (a first look of 3 runs with at most 9
runs in all: looks after 3, 6 and 9), up to the scenario's ``max_runs`` runs in all
(perfgate.gate.looks spends alpha and beta over the looks): a look of one run more would
barely narrow an interval that rests on several.

Every run costs runner time, so the plan is capped: at most ``max_runs`` runs in all, and at
most ``budget_runs`` (the runner time a verdict may take over what one run took). A metric
that needs more is named, and :func:`supported_tolerance` says the tightest tolerance its
spread allows within the cap.
With a quiet baseline (the CPU scenarios, launches calm against the tolerance), the first look
is after one run, as it always was.

The plan is made from the approved runs before any current run is judged, so it cannot bend
a verdict's levels toward a result: the looks' error rates hold whatever it chooses
(benchmarks/gate_quality.py measures them with it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from perfgate.gate.estimate import MIN_SPREAD, clean_runs
from perfgate.gate.interval import tolerance_bounds
from perfgate.gate.looks import look_levels, looks_of
from perfgate.gate.stats import median, median_variance_factor, pooled_pairwise_sd, t_ppf
from perfgate.metrics import METRICS, Direction

# Unchanged code is to pass the first look of every gated metric at once with at least this
# chance; the looks after it settle some of the rest. Asked of each metric alone, two or three
# metrics near their tolerances failed it together more often: on the GPU scenario's measured
# noise at its tolerances 1.70% of unchanged verdicts ended inconclusive, at the goal's
# tolerances on launches 0.35 and 0.25 times as scattered 1.70% and 1.65%; asked of all at
# once, 1.15%, 1.05% and 1.15%, for 0.2-0.3 runs more a verdict (2000 trials per cell,
# benchmarks/gate_quality_gpu.py; benchmarks/results/gate-quality.md).
FIRST_PASS = 0.98
# A change of twice the tolerance is to be caught by the last look with this chance: what
# the plan reports (a plan that falls short says so); it does not set the runs.
DETECT_AT_TWICE = 0.95


@dataclass(frozen=True)
class MetricPlan:
    """What one metric's approved runs say about the runs its verdict needs.

    ``run_sd`` is the spread of one run's centre between launches (log scale; None with one
    approved run: unknown), ``first_look`` the fewest runs at which unchanged code passes
    the first look alone with FIRST_PASS (None: not within the cap), ``detection`` the predicted
    chance that a change of twice the tolerance is caught by the plan's last look.
    """

    metric: str
    run_sd: float | None
    baseline_runs: int
    first_look: int | None
    detection: float | None


@dataclass(frozen=True)
class RunPlan:
    """The runs of one verdict: the first look after ``first_look`` runs, at most ``max_runs``.

    ``max_runs`` is the cap: the scenario's ``max_runs``, or fewer where the runner time
    (``budget_runs``, None: no such cap) allows fewer; ``metrics`` holds each gated metric's
    plan.
    """

    first_look: int
    max_runs: int
    budget_runs: int | None
    metrics: tuple[MetricPlan, ...] = ()

    @property
    def short(self) -> tuple[str, ...]:
        """The gated metrics whose first look needs more runs than the cap allows."""
        return tuple(m.metric for m in self.metrics if m.first_look is None)

    def describe(self) -> str:
        """One phrase: the runs planned, and why."""
        noisy = [m for m in self.metrics if m.run_sd is not None]
        widest = max(noisy, key=lambda m: m.first_look or math.inf, default=None)
        text = f"first look after {self.first_look} run{'s' if self.first_look > 1 else ''}"
        text += f", at most {self.max_runs}"
        if widest is not None and widest.run_sd is not None and self.first_look > 1:
            text += f" ({widest.metric}'s approved launches scatter {widest.run_sd:.1%})"
        if self.short:
            text += (
                f"; {', '.join(self.short)} would need more runs than the {self.max_runs} allowed"
            )
            if self.budget_runs is not None and self.budget_runs <= self.max_runs:
                text += " (what the runner time allows)"
        return text


def single_run_plan(max_runs: int) -> RunPlan:
    """The plan of a verdict judged after every run from the first (no spread to plan by)."""
    return RunPlan(first_look=1, max_runs=max(max_runs, 1), budget_runs=None)


def run_sd(runs: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """The spread of one run's centre between launches, and the approved runs it came from.

    The sample sd of the runs' medians on the log scale, never less than what the noise of
    their repeats (a robust spread, at least MIN_SPREAD) implies for a median of that many
    repeats. None with fewer than two runs: one launch shows nothing of the next.
    """
    logs = clean_runs(runs)
    if len(logs) < 2:
        return None
    centres = [median(r) for r in logs]
    mean = sum(centres) / len(centres)
    between = math.sqrt(sum((c - mean) ** 2 for c in centres) / (len(centres) - 1))
    within = pooled_pairwise_sd(logs)
    repeats = int(median([len(r) for r in logs]))
    floor = max(within[0] if within else 0.0, MIN_SPREAD) * math.sqrt(
        median_variance_factor(repeats)
    )
    return max(between, floor), len(logs)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def pass_chance(sd: float, baseline_runs: int, runs: int, tolerance: float, beta: float) -> float:
    """The chance that unchanged code passes a look of ``runs`` runs (its level ``beta``).

    >>> round(pass_chance(0.0268, 10, 1, 0.03, 0.17), 3)  # tok/s on the H200, one launch
    0.53
    >>> round(pass_chance(0.0268, 10, 1, 0.10, 0.17), 3)  # against the 10% it had
    0.997
    """
    worst, _ = tolerance_bounds(Direction.HIGHER_IS_BETTER, tolerance)
    se = sd * math.sqrt(1.0 / baseline_runs + 1.0 / runs)
    df = float(max(baseline_runs + runs - 2, 1))
    return _normal_cdf(-worst / se - t_ppf(1.0 - beta, df))


def detect_chance(
    sd: float, baseline_runs: int, runs: int, tolerance: float, alpha: float
) -> float:
    """The chance that a look of ``runs`` runs at level ``alpha`` catches twice the tolerance."""
    worst, _ = tolerance_bounds(Direction.HIGHER_IS_BETTER, tolerance)
    twice, _ = tolerance_bounds(Direction.HIGHER_IS_BETTER, min(2.0 * tolerance, 0.99))
    se = sd * math.sqrt(1.0 / baseline_runs + 1.0 / runs)
    df = float(max(baseline_runs + runs - 2, 1))
    return _normal_cdf((worst - twice) / se - t_ppf(1.0 - alpha, df))


def plan_runs(
    baseline: Mapping[str, Sequence[Sequence[float]]],
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    *,
    alpha: float,
    beta: float,
    max_runs: int,
    budget_runs: int | None = None,
    default_tolerance: float = 0.03,
) -> RunPlan:
    """Plan a verdict's runs from its approved runs (see the module's description).

    ``max_runs`` is the scenario's: the most runs a verdict may take, the first look after
    the planned runs and each later one as many more. ``budget_runs`` caps them further
    (the runner time; None: no such cap). ``alpha`` and ``beta`` are the scenario's, spent
    over the looks.
    """
    cap = max(min(max_runs, budget_runs if budget_runs is not None else max_runs), 1)
    plans = []
    for metric in gated:
        found = run_sd(baseline.get(metric, ()))
        tolerance = tolerances.get(metric, default_tolerance)
        if found is None or metric not in METRICS:
            plans.append(MetricPlan(metric, None, len(baseline.get(metric, ())), 1, None))
            continue
        sd, runs = found
        first_look = _first_look([(sd, runs, tolerance)], alpha, beta, cap)
        plans.append(MetricPlan(metric, sd, runs, first_look, None))
    noisy = [
        (p.run_sd, p.baseline_runs, tolerances.get(p.metric, default_tolerance))
        for p in plans
        if p.run_sd is not None
    ]
    together = _first_look(noisy, alpha, beta, cap) if noisy else 1
    first = min(max([p.first_look or cap for p in plans] + [together or cap, 1]), cap)
    looks = looks_of(cap, first)
    last_alpha = look_levels(alpha, beta, looks, looks)[0] / max(len(gated), 1)
    plans = [
        replace(
            p,
            detection=None
            if p.run_sd is None
            else detect_chance(
                p.run_sd,
                p.baseline_runs,
                cap,
                tolerances.get(p.metric, default_tolerance),
                last_alpha,
            ),
        )
        for p in plans
    ]
    return RunPlan(first, cap, budget_runs, tuple(plans))


def _first_look(
    metrics: Sequence[tuple[float, int, float]], alpha: float, beta: float, cap: int
) -> int | None:
    """The fewest runs whose first look unchanged code passes for every one of ``metrics``
    (each its spread, approved runs and tolerance) with FIRST_PASS together, at the first
    look's beta of a verdict of at most ``cap`` runs planned so (its looks depend on it)."""
    for runs in range(1, cap + 1):
        beta_first = look_levels(alpha, beta, 1, looks_of(cap, runs))[1]
        chance = math.prod(
            pass_chance(sd, count, runs, tolerance, beta_first) for sd, count, tolerance in metrics
        )
        if chance >= FIRST_PASS:
            return runs
    return None


def supported_tolerance(
    sd: float, baseline_runs: int, *, alpha: float, beta: float, max_runs: int
) -> float:
    """The tightest tolerance (to 0.1%) at which a metric of this spread is planned within
    ``max_runs`` runs and a change of twice it is caught by the last look with
    DETECT_AT_TWICE, alone among the gated metrics' levels as :func:`plan_runs` spends them
    over four metrics.

    >>> supported_tolerance(0.0268, 20, alpha=0.2, beta=0.2, max_runs=10)  # tok/s
    0.034
    >>> supported_tolerance(0.0010, 10, alpha=0.2, beta=0.2, max_runs=10)  # verify
    0.002
    """
    cap = max(max_runs, 1)
    for step in range(1, 1000):
        tolerance = step / 1000
        first = _first_look([(sd, baseline_runs, tolerance)], alpha, beta, cap)
        if first is None:
            continue
        looks = looks_of(cap, first)
        last_alpha = look_levels(alpha, beta, looks, looks)[0] / 4
        if detect_chance(sd, baseline_runs, cap, tolerance, last_alpha) >= DETECT_AT_TWICE:
            return tolerance
    return 0.999
