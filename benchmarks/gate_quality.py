"""Verdict quality of perfgate's gate on simulated runs, beside two rules from other tools.

    python benchmarks/gate_quality.py                  # the defaults; about a minute on 2 cores
    python benchmarks/gate_quality.py --trials 4000 --jobs 2 --seed 7

What it simulates: a scenario with four gated metrics (``output_tok_s``, ``speedup``,
``accept_length``, ``verify_ms``), an approved baseline of ``--baseline-runs`` runs of
``--repeats`` repeats each, and a change under test that slows ``output_tok_s`` by 0 to 4
tolerances (the other three metrics do not change). Every value is::

    100 * (1 - change) * exp(b_run + e_repeat) * slow_repeat * clock_state

with the noise shapes of ``SHAPES``. perfgate's gate judges the four metrics as one family
and measures another run while any is inconclusive, up to ``--max-runs``; the other rules
judge the same approved runs and the same first current run, as they would in CI:

* pytest-benchmark ``--benchmark-compare-fail=mean:5%``: the mean time of a repeat
  (1 / tok/s) against the latest saved run's, failing above +5%.
* Bencher's ``t_test`` threshold, as in its docs' example (upper boundary 0.99): the
  current run's mean against a Student-t prediction interval of the baseline runs' means,
  ``mean - t(0.99, K-1) * s * sqrt(1 + 1/K)``.

Reported per noise shape, for the changed metric: false alarms with no change (a
``regression`` verdict: the build fails), alarms at half the tolerance, detection at twice
the tolerance, the mean number of runs per verdict over the grid of changes, the share still
inconclusive at the end, and (``any of 4``) the chance that any of the four metrics raises a
false alarm when nothing changed. The ``too noisy`` shape lies outside what a 3% tolerance
can resolve with 5 baseline runs; it is shown, not counted in the worst case.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.gate import DEFAULT_ALPHA, DEFAULT_BETA, Status, judge_runs
from perfgate.gate.stats import t_ppf
from perfgate.metrics import METRICS, Direction

GATED = ("output_tok_s", "speedup", "accept_length", "verify_ms")
CHANGED = "output_tok_s"
CHANGES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # in tolerances


@dataclass(frozen=True)
class Shape:
    """A noise shape: how runs and repeats scatter (sds are of the log, 0.01 ~ 1%)."""

    name: str
    within_sd: float
    between_sd: float
    within_df: float | None = None  # Student-t repeats with this df (None: normal)
    between_df: float | None = None  # Student-t run shifts with this df
    slow_chance: float = 0.0  # per repeat
    slow_by: tuple[float, float] = (0.1, 0.5)  # a slow repeat loses this much, uniformly
    clock_chance: float = 0.0  # per run: the run sits in the slower clock state
    clock_by: float = 0.0
    counted: bool = True  # part of the worst case


SHAPES = (
    Shape("quiet", within_sd=0.003, between_sd=0.002),
    Shape("typical", within_sd=0.010, between_sd=0.007),
    Shape("restarts > repeats", within_sd=0.003, between_sd=0.010),
    Shape("heavy tails", within_sd=0.005, between_sd=0.005, within_df=2, between_df=3),
    Shape("slow repeats", within_sd=0.005, between_sd=0.005, slow_chance=0.05),
    Shape("two clock states", within_sd=0.004, between_sd=0.002, clock_chance=0.3, clock_by=0.02),
    Shape("too noisy", within_sd=0.010, between_sd=0.030, counted=False),
)


def _noise(rng: random.Random, sd: float, df: float | None) -> float:
    if df is None:
        return rng.gauss(0.0, sd)
    # Student-t scaled to the same interquartile range as the normal with this sd.
    chi2 = rng.gammavariate(df / 2.0, 2.0)
    return sd * 0.6745 / t_ppf(0.75, df) * rng.gauss(0.0, 1.0) / math.sqrt(chi2 / df)


def draw_run(shape: Shape, rng: random.Random, repeats: int, factor: float) -> list[float]:
    """One run (a fresh server launch): ``repeats`` values of a metric whose truth is 100."""
    shift = _noise(rng, shape.between_sd, shape.between_df)
    if rng.random() < shape.clock_chance:
        shift += math.log1p(-shape.clock_by)
    values = []
    for _ in range(repeats):
        value = 100.0 * factor * math.exp(shift + _noise(rng, shape.within_sd, shape.within_df))
        if rng.random() < shape.slow_chance:
            value *= 1.0 - rng.uniform(*shape.slow_by)
        values.append(value)
    return values


def _worse(metric: str, factor: float) -> float:
    """The true multiplier of a metric made worse by ``1 - factor``, in its own direction."""
    return factor if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else 1.0 / factor


@dataclass
class Tally:
    """Counts over the trials of one (shape, change) cell."""

    trials: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)  # rule -> regression verdicts
    family_alarms: dict[str, int] = field(default_factory=dict)  # rule -> any of 4 flagged
    inconclusive: int = 0
    runs: int = 0

    def add(self, rule: str, regression: bool, any_alarm: bool) -> None:
        self.verdicts[rule] = self.verdicts.get(rule, 0) + int(regression)
        self.family_alarms[rule] = self.family_alarms.get(rule, 0) + int(any_alarm)


@dataclass(frozen=True)
class Settings:
    noise_scale: float
    repeats: int
    baseline_runs: int
    tolerance: float
    max_runs: int
    alpha: float
    beta: float


Runs = dict[str, list[list[float]]]  # metric -> runs -> repeats


def gate_trial(
    baseline: Runs,
    first: dict[str, list[float]],
    again: Callable[[], dict[str, list[float]]],
    settings: Settings,
) -> tuple[Status, bool, int]:
    """perfgate: judge the family, measuring again (``again()``) while anything is inconclusive."""
    current: Runs = {m: [first[m]] for m in GATED}
    tolerances = dict.fromkeys(GATED, settings.tolerance)
    for run in range(1, settings.max_runs + 1):
        if run > 1:
            for m, values in again().items():
                current[m].append(values)
        verdicts = judge_runs(
            baseline,
            current,
            tolerances,
            GATED,
            alpha=settings.alpha,
            beta=settings.beta,
            final=run == settings.max_runs,
        )
        if all(v.status is not Status.INCONCLUSIVE for v in verdicts):
            break
    statuses = {v.metric: v.status for v in verdicts}
    alarm = any(s is Status.REGRESSION for s in statuses.values())
    return statuses[CHANGED], alarm, run


def pytest_benchmark_alarm(metric: str, baseline: Sequence[list[float]], run: list[float]) -> bool:
    """``mean:5%`` on the time of a repeat, against the latest saved run only."""

    def mean_time(values: list[float]) -> float:
        times = [
            1.0 / v if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else v
            for v in values
        ]
        return sum(times) / len(times)

    return mean_time(run) / mean_time(baseline[-1]) - 1.0 > 0.05


def bencher_alarm(metric: str, baseline: Sequence[list[float]], run: list[float]) -> bool:
    """Bencher ``t_test``, boundary 0.99: one new mean against the history's run means."""
    history = [sum(r) / len(r) for r in baseline]
    k = len(history)
    centre = sum(history) / k
    sd = math.sqrt(sum((h - centre) ** 2 for h in history) / (k - 1))
    margin = t_ppf(0.99, k - 1) * sd * math.sqrt(1.0 + 1.0 / k)
    value = sum(run) / len(run)
    if METRICS[metric].direction is Direction.HIGHER_IS_BETTER:
        return value < centre - margin
    return value > centre + margin


def other_rules(baseline: Runs, first: dict[str, list[float]]) -> dict[str, tuple[bool, bool]]:
    """Each peer rule's (changed metric flagged, any of the 4 flagged) on the first run."""
    result = {}
    for name, rule in (
        ("pytest-benchmark mean:5%", pytest_benchmark_alarm),
        ("Bencher t-test 0.99", bencher_alarm),
    ):
        flags = {m: rule(m, baseline[m], first[m]) for m in GATED}
        result[name] = (flags[CHANGED], any(flags.values()))
    return result


def run_cell(args: tuple[Shape, float, Settings, int, int]) -> tuple[str, float, Tally]:
    """All trials of one (shape, change) cell, from its own seed."""
    shape, change, settings, trials, seed = args
    rng = random.Random(seed)
    factor = 1.0 - change * settings.tolerance

    scaled = replace(
        shape,
        within_sd=shape.within_sd * settings.noise_scale,
        between_sd=shape.between_sd * settings.noise_scale,
        clock_by=shape.clock_by * settings.noise_scale,
    )

    def draw(metric: str, f: float) -> list[float]:
        return draw_run(scaled, rng, settings.repeats, _worse(metric, f))

    def current_run() -> dict[str, list[float]]:
        return {m: draw(m, factor if m == CHANGED else 1.0) for m in GATED}

    tally = Tally()
    for _ in range(trials):
        # Every rule judges the same approved runs and the same first current run; only
        # perfgate asks for more runs.
        baseline = {m: [draw(m, 1.0) for _ in range(settings.baseline_runs)] for m in GATED}
        first = current_run()
        status, alarm, runs = gate_trial(baseline, first, current_run, settings)
        tally.trials += 1
        tally.add("perfgate", status is Status.REGRESSION, alarm)
        tally.inconclusive += status is Status.INCONCLUSIVE
        tally.runs += runs
        for name, (flagged, any_alarm) in other_rules(baseline, first).items():
            tally.add(name, flagged, any_alarm)
    return shape.name, change, tally


RULES = ("perfgate", "pytest-benchmark mean:5%", "Bencher t-test 0.99")


def render(results: dict[tuple[str, float], Tally], settings: Settings) -> list[str]:
    """One Markdown table per rule: per shape, then the worst case over the counted shapes."""
    lines: list[str] = []
    for rule in RULES:
        lines += [
            "",
            f"**{rule}**",
            "",
            "| noise shape | false alarms, no change | any of 4, no change | alarms at 0.5x tol "
            "| detection at 2x tol | runs per verdict, no change | runs per verdict, 0-4x tol "
            "| inconclusive, 0-4x tol |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        rows = [_row(shape, rule, results) for shape in SHAPES]
        for shape, row in zip(SHAPES, rows, strict=True):
            lines.append(_format(shape.name + ("" if shape.counted else " (not counted)"), row))
        counted = [row for shape, row in zip(SHAPES, rows, strict=True) if shape.counted]
        # Detection is worst at its minimum; every other column at its maximum.
        worst = tuple(
            (min if column == 3 else max)(r[column] for r in counted) for column in range(7)
        )
        lines.append(_format("**worst case**", worst))
    return lines


def _row(shape: Shape, rule: str, results: dict[tuple[str, float], Tally]) -> tuple[float, ...]:
    def rate(change: float, family: bool = False) -> float:
        tally = results[(shape.name, change)]
        counts = tally.family_alarms if family else tally.verdicts
        return counts[rule] / tally.trials

    cells = [results[(shape.name, c)] for c in CHANGES]
    gate = rule == "perfgate"
    still = results[(shape.name, 0.0)]
    runs_still = still.runs / still.trials if gate else 1.0
    runs = sum(t.runs / t.trials for t in cells) / len(cells) if gate else 1.0
    undecided = sum(t.inconclusive / t.trials for t in cells) / len(cells) if gate else 0.0
    return rate(0.0), rate(0.0, family=True), rate(0.5), rate(2.0), runs_still, runs, undecided


def _format(name: str, row: Sequence[float]) -> str:
    fa, family, half, detect, runs_still, runs, undecided = row
    return (
        f"| {name} | {fa:.2%} | {family:.2%} | {half:.2%} | {detect:.1%} | {runs_still:.2f} "
        f"| {runs:.2f} | {undecided:.2%} |"
    )


def detail(results: dict[tuple[str, float], Tally]) -> list[str]:
    """perfgate's regression rate and mean runs at every simulated change."""
    head = " | ".join(f"{c:g}x" for c in CHANGES)
    lines = [
        "",
        "**perfgate: regression verdicts / mean runs, per true slowdown (in tolerances)**",
        "",
    ]
    lines += [f"| noise shape | {head} |", "| --- |" + " ---: |" * len(CHANGES)]
    for shape in SHAPES:
        cells = [results[(shape.name, c)] for c in CHANGES]
        text = " | ".join(
            f"{t.verdicts['perfgate'] / t.trials:.1%} / {t.runs / t.trials:.2f}" for t in cells
        )
        lines.append(f"| {shape.name} | {text} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="per shape and change")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--max-runs", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--beta", type=float, default=DEFAULT_BETA)
    parser.add_argument(
        "--noise-scale", type=float, default=1.0, help="multiply every shape's noise by this"
    )
    args = parser.parse_args(argv)
    settings = Settings(
        args.noise_scale,
        args.repeats,
        args.baseline_runs,
        args.tolerance,
        args.max_runs,
        args.alpha,
        args.beta,
    )
    cells = [
        (shape, change, settings, args.trials, args.seed * 1000 + 100 * i + j)
        for i, shape in enumerate(SHAPES)
        for j, change in enumerate(CHANGES)
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = {(name, change): tally for name, change, tally in pool.map(run_cell, cells)}
    elapsed = time.perf_counter() - started
    print(
        f"gate quality: {args.trials} trials per cell, {args.repeats} repeats, "
        f"{args.baseline_runs} baseline runs, tolerance {args.tolerance:.0%}, "
        f"max {args.max_runs} runs, alpha {args.alpha}, beta {args.beta}, "
        f"noise x{args.noise_scale}, seed {args.seed}; "
        f"{elapsed:.0f} s"
    )
    print("\n".join(render(results, settings) + detail(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
