"""Verdict quality of perfgate's gate on simulated runs, beside two rules from other tools.

    python benchmarks/gate_quality.py                       # every setting; minutes on 2 cores
    python benchmarks/gate_quality.py --setting defaults --trials 300   # one, quicker
    python benchmarks/gate_quality.py --trials 4000 --jobs 2 --seed 7

What it simulates: a scenario with four gated metrics (``output_tok_s``, ``speedup``,
``accept_length``, ``verify_ms``), an approved baseline of ``baseline_runs`` runs of
``repeats`` repeats each, and a change under test that slows ``output_tok_s`` by 0 to 4
tolerances (the other three metrics do not change). Every value is::

    100 * (1 - change) * exp(b_run + e_repeat) * slow_repeat * clock_state

with the noise shapes of ``SHAPES``; in the ``slow share of repeats`` shape the change is
not spread over every repeat but carried by two repeats of five (one of three) in each
current run, so the median of a run barely moves while the mean moves by the change. In the
``slower and scattered`` shape the change slows every repeat and doubles the repeat noise of
the current runs as well: their repeats scatter more than the baseline's, so a lone current
run's interval must not rest on the baseline's calm where it decides a pass. Each
setting of ``SETTINGS`` is simulated: the defaults (5 repeats, 5 approved runs, 3%
tolerance), 3 repeats per run, one approved run, and ten (what the docs advise where
launches scatter).

perfgate's gate runs the session's whole loop (``session_loop``, as
``perfgate.pipeline.ScenarioRun.judge``): it plans the runs of the first look from the
approved runs' spread (``perfgate.gate.planning``), judges the four metrics as one family
(``perfgate.gate.judge_look``) and measures as many runs again while the look says more can
change the outcome, up to ``--max-runs`` runs in all (the scenario's ``max_runs``) and
``--budget-runs`` (what the runner time allows). The other rules
judge the same approved runs and the same first current run, as they would in CI:

* pytest-benchmark ``--benchmark-compare-fail=mean:5%``: the mean time of a repeat
  (1 / tok/s) against the latest saved run's, failing above +5%.
* Bencher's ``t_test`` threshold, as in its docs' example (upper boundary 0.99): the
  current run's mean against a Student-t prediction interval of the baseline runs' means,
  ``mean - t(0.99, K-1) * s * sqrt(1 + 1/K)`` (undefined with one approved run).

Reported per noise shape: false alarms with no change (a ``regression`` verdict for the
changed metric, and for any of the four: the build fails), the most alarms at up to half
the tolerance, the least detection at twice the tolerance or more, the mean number of runs
per verdict (at no change, and over the grid of changes), and the share still inconclusive
at the end. The ``too noisy`` shape lies outside what a 3% tolerance can resolve with 5
approved runs; it is shown, not counted in the worst case.

Last, unless ``--no-gpu``: the GPU scenario with each gated metric on the noise its committed
H200 launches measured, against the goals of a gate that sees 6% there
(``benchmarks/gate_quality_gpu.py``).
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

from perfgate.gate import DEFAULT_ALPHA, DEFAULT_BETA, Status, judge_look
from perfgate.gate.planning import plan_runs
from perfgate.gate.stats import t_ppf
from perfgate.metrics import METRICS, Direction

GATED = ("output_tok_s", "speedup", "accept_length", "verify_ms")
CHANGED = "output_tok_s"
CHANGES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # in tolerances
SMALL = (0.0, 0.25, 0.5)  # changes at most half the tolerance: an alarm there is false
LARGE = (2.0, 3.0, 4.0)  # changes at least twice the tolerance: to be detected


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
    change_share: float = 1.0  # the share of a current run's repeats that carry the change
    changed_scatter: float = 1.0  # a changed run's repeat noise, in times within_sd
    counted: bool = True  # part of the worst case


SHAPES = (
    Shape("quiet", within_sd=0.003, between_sd=0.002),
    Shape("typical", within_sd=0.010, between_sd=0.007),
    Shape("restarts > repeats", within_sd=0.003, between_sd=0.010),
    Shape("restarts 1.5x repeats", within_sd=0.006, between_sd=0.009),
    Shape("heavy tails", within_sd=0.005, between_sd=0.005, within_df=2, between_df=3),
    Shape("slow repeats", within_sd=0.005, between_sd=0.005, slow_chance=0.05),
    Shape("two clock states", within_sd=0.004, between_sd=0.002, clock_chance=0.3, clock_by=0.02),
    Shape("slow share of repeats", within_sd=0.005, between_sd=0.005, change_share=0.4),
    Shape("too noisy", within_sd=0.010, between_sd=0.030, counted=False),
    # Measured: embedded-large-gpu on an H200, 6 fresh launches (benchmarks/results/
    # h200-real-weights.md): tok/s 2.64% within a run, 2.55% between launches, against its 10%
    # tolerance; here at the same share of the 3% tolerance the benchmark simulates.
    Shape("H200 launches", within_sd=0.0264 * 0.3, between_sd=0.0255 * 0.3),
    # Last, so that the shapes before it keep their seeds.
    Shape("slower and scattered", within_sd=0.005, between_sd=0.005, changed_scatter=2.0),
    # Measured again on the engine of 2026-12-01, 10 fresh launches (the same record): tok/s
    # 1.68% within a run, 1.22% between launches; scaled as above.
    Shape("H200 launches (10)", within_sd=0.0168 * 0.3, between_sd=0.0122 * 0.3),
    # Measured on the engine with the triton attention backend, 10 fresh launches (the same
    # record, its latest section): speedup 3.02% within a run and 3.90% between launches, the
    # most scattered of the gated metrics there, against the 12.5% tolerance it set for
    # speedup (at 10%, detection at twice the tolerance was 85.3%); scaled to the 3% likewise.
    Shape("H200 launches (10), speedup", within_sd=0.0302 * 0.24, between_sd=0.0390 * 0.24),
    # Measured on the latest engine, 10 fresh launches (the same record, its first section,
    # "2026-12-01 (fifth)", h200-real-weights/2026-12-01-ends/noise.md): tok/s 0.91% within a
    # run and 2.63% between launches, speedup 1.54% and 3.95%, against the GPU scenario's 7%
    # and 10% (perfgate.toml); scaled to the 3% simulated likewise (x3/7 and x0.3). The GPU
    # scenario on this noise, metric by metric at its own tolerances: gate_quality_gpu.py.
    Shape("H200 fifth (10), tok/s", within_sd=0.0091 * 3 / 7, between_sd=0.0263 * 3 / 7),
    Shape("H200 fifth (10), speedup", within_sd=0.0154 * 0.3, between_sd=0.0395 * 0.3),
    # Measured with prefill graphs (--cuda-graph-backend-prefill full), 10 fresh launches on an
    # H100 (benchmarks/results/h200-gate-proof.md, 2026-12-06, third lease; noise.md there):
    # tok/s 0.20% within a run and 0.17% between launches, speedup 0.23% and 0.17%, against
    # the 3% `baseline update` derives for both from them: as measured, not scaled.
    Shape("H100 prefill graphs (10), tok/s", within_sd=0.0020, between_sd=0.0017),
    Shape("H100 prefill graphs (10), speedup", within_sd=0.0023, between_sd=0.0017),
)


@dataclass(frozen=True)
class Setting:
    """How many repeats per run and approved runs a simulated scenario has."""

    name: str
    repeats: int
    baseline_runs: int


SETTINGS = {
    "defaults": Setting("the defaults: 5 repeats, 5 approved runs", 5, 5),
    "3-repeats": Setting("3 repeats per run, 5 approved runs", 3, 5),
    "1-approved": Setting("5 repeats, one approved run", 5, 1),
    # What `perfgate baseline update --keep 10` approves, as the docs advise where launches
    # scatter (the GPU scenario's baseline).
    "10-approved": Setting("5 repeats, 10 approved runs", 5, 10),
}


def _noise(rng: random.Random, sd: float, df: float | None) -> float:
    if df is None:
        return rng.gauss(0.0, sd)
    # Student-t scaled to the same interquartile range as the normal with this sd.
    chi2 = rng.gammavariate(df / 2.0, 2.0)
    return sd * 0.6745 / t_ppf(0.75, df) * rng.gauss(0.0, 1.0) / math.sqrt(chi2 / df)


def draw_run(shape: Shape, rng: random.Random, repeats: int, factor: float) -> list[float]:
    """One run (a fresh server launch): ``repeats`` values of a metric whose truth is 100.

    The change (``factor``) slows every repeat, or only ``change_share`` of them by as much
    more as keeps the run's mean log at ``log(factor)``; a changed run's repeats scatter
    ``changed_scatter`` times as much as the shape's.
    """
    within = shape.within_sd * (shape.changed_scatter if factor != 1.0 else 1.0)
    shift = _noise(rng, shape.between_sd, shape.between_df)
    if rng.random() < shape.clock_chance:
        shift += math.log1p(-shape.clock_by)
    changed = _changed_repeats(shape, rng, repeats, factor)
    values = []
    for i in range(repeats):
        value = 100.0 * math.exp(shift + _noise(rng, within, shape.within_df))
        value *= changed.get(i, 1.0)
        if rng.random() < shape.slow_chance:
            value *= 1.0 - rng.uniform(*shape.slow_by)
        values.append(value)
    return values


def _changed_repeats(
    shape: Shape, rng: random.Random, repeats: int, factor: float
) -> dict[int, float]:
    """Which repeats carry the change, and by what factor each."""
    if shape.change_share >= 1.0 or factor == 1.0:
        return dict.fromkeys(range(repeats), factor)
    carriers = max(1, round(shape.change_share * repeats))
    return dict.fromkeys(rng.sample(range(repeats), carriers), factor ** (repeats / carriers))


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
    passes: int = 0  # perfgate's pass or improvement verdicts for the changed metric
    runs: int = 0

    def add(self, rule: str, regression: bool | None, any_alarm: bool | None) -> None:
        """Count one trial's outcome for ``rule``; None where the rule cannot judge."""
        if regression is None or any_alarm is None:
            self.verdicts.setdefault(rule, -1)
            return
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
    budget_runs: int | None = None  # the runs a verdict may take in all (runner time)


Runs = dict[str, list[list[float]]]  # metric -> runs -> repeats


def gate_trial(
    baseline: Runs,
    first: dict[str, list[float]],
    again: Callable[[], dict[str, list[float]]],
    settings: Settings,
) -> tuple[Status, bool, int]:
    """perfgate's session loop: judge the family, measuring again while the look says so."""
    tolerances = dict.fromkeys(GATED, settings.tolerance)
    statuses, runs = session_loop(baseline, first, again, tolerances, GATED, settings)
    alarm = any(s is Status.REGRESSION for s in statuses.values())
    return statuses[CHANGED], alarm, runs


def session_loop(
    baseline: Runs,
    first: dict[str, list[float]],
    again: Callable[[], dict[str, list[float]]],
    tolerances: dict[str, float],
    gated: Sequence[str],
    settings: Settings,
) -> tuple[dict[str, Status], int]:
    """What perfgate.pipeline.ScenarioRun.judge does: plan the runs from the baseline's spread
    (perfgate.gate.planning), measure them, then judge, measuring again while a look says so.
    Returns each metric's final status and the runs measured."""
    plan = plan_runs(
        baseline,
        tolerances,
        gated,
        alpha=settings.alpha,
        beta=settings.beta,
        max_runs=settings.max_runs,
        budget_runs=settings.budget_runs,
    )
    current: Runs = {m: [first[m]] for m in gated}
    while len(current[gated[0]]) < plan.first_look:
        for m, values in again().items():
            current[m].append(values)
    while True:
        look = judge_look(
            baseline,
            current,
            tolerances,
            gated,
            alpha=settings.alpha,
            beta=settings.beta,
            max_runs=plan.max_runs,
            first_runs=plan.first_look,
        )
        if not look.another_run:
            break
        while len(current[gated[0]]) < look.next_runs:
            for m, values in again().items():
                current[m].append(values)
    return {v.metric: v.status for v in look.verdicts}, look.number


def pytest_benchmark_alarm(
    metric: str, baseline: Sequence[list[float]], run: list[float]
) -> bool | None:
    """``mean:5%`` on the time of a repeat, against the latest saved run only."""

    def mean_time(values: list[float]) -> float:
        times = [
            1.0 / v if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else v
            for v in values
        ]
        return sum(times) / len(times)

    return mean_time(run) / mean_time(baseline[-1]) - 1.0 > 0.05


def bencher_alarm(metric: str, baseline: Sequence[list[float]], run: list[float]) -> bool | None:
    """Bencher ``t_test``, boundary 0.99: one new mean against the history's run means."""
    history = [sum(r) / len(r) for r in baseline]
    k = len(history)
    if k < 2:
        return None  # no spread to build the interval from
    centre = sum(history) / k
    sd = math.sqrt(sum((h - centre) ** 2 for h in history) / (k - 1))
    margin = t_ppf(0.99, k - 1) * sd * math.sqrt(1.0 + 1.0 / k)
    value = sum(run) / len(run)
    if METRICS[metric].direction is Direction.HIGHER_IS_BETTER:
        return value < centre - margin
    return value > centre + margin


PEERS = (
    ("pytest-benchmark mean:5%", pytest_benchmark_alarm),
    ("Bencher t-test 0.99", bencher_alarm),
)


def other_rules(
    baseline: Runs, first: dict[str, list[float]]
) -> dict[str, tuple[bool | None, bool | None]]:
    """Each peer rule's (changed metric flagged, any of the 4 flagged) on the first run."""
    result: dict[str, tuple[bool | None, bool | None]] = {}
    for name, rule in PEERS:
        flags = {m: rule(m, baseline[m], first[m]) for m in GATED}
        if any(flag is None for flag in flags.values()):
            result[name] = (None, None)
        else:
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
        tally.passes += status in (Status.PASS, Status.IMPROVEMENT)
        tally.runs += runs
        for name, (flagged, any_alarm) in other_rules(baseline, first).items():
            tally.add(name, flagged, any_alarm)
    return shape.name, change, tally


RULES = ("perfgate", *(name for name, _ in PEERS))
Results = dict[tuple[str, float], Tally]

# The goals, per column of a row (see _row): (column, "max" or "min", bound).
GOALS = (
    ("false alarms, any of 4, no change", 1, "max", 0.01),
    ("alarms at <= 0.5x tolerance", 2, "max", 0.03),
    ("detection at >= 2x tolerance", 3, "min", 0.95),
    ("runs per verdict, 0-4x tolerance", 5, "max", 1.6),
)


def render(results: Results) -> list[str]:
    """One Markdown table per rule: per shape, then the worst case over the counted shapes."""
    lines: list[str] = []
    for rule in RULES:
        if any(t.verdicts.get(rule, 0) < 0 for t in results.values()):
            lines += ["", f"**{rule}**: cannot judge this setting (it needs two approved runs)"]
            continue
        lines += [
            "",
            f"**{rule}**",
            "",
            "| noise shape | false alarms, no change | any of 4, no change "
            "| alarms at <= 0.5x tol | detection at >= 2x tol | runs per verdict, no change "
            "| runs per verdict, 0-4x tol | inconclusive, no change | inconclusive, 0-4x tol |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        rows = [_row(shape, rule, results) for shape in SHAPES]
        for shape, row in zip(SHAPES, rows, strict=True):
            lines.append(_format(shape.name + ("" if shape.counted else " (not counted)"), row))
        lines.append(_format("**worst case**", worst_case(rows)))
    return lines


def worst_case(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """Per column, the worst over the counted shapes (detection at its minimum)."""
    counted = [row for shape, row in zip(SHAPES, rows, strict=True) if shape.counted]
    return tuple(
        (min if column == 3 else max)(r[column] for r in counted) for column in range(len(rows[0]))
    )


def _row(shape: Shape, rule: str, results: Results) -> tuple[float, ...]:
    def rate(change: float, family: bool = False) -> float:
        tally = results[(shape.name, change)]
        counts = tally.family_alarms if family else tally.verdicts
        return counts[rule] / tally.trials

    cells = [results[(shape.name, c)] for c in CHANGES]
    gate = rule == "perfgate"
    still = results[(shape.name, 0.0)]
    runs_still = still.runs / still.trials if gate else 1.0
    runs = sum(t.runs / t.trials for t in cells) / len(cells) if gate else 1.0
    undecided_still = still.inconclusive / still.trials if gate else 0.0
    undecided = sum(t.inconclusive / t.trials for t in cells) / len(cells) if gate else 0.0
    return (
        rate(0.0),
        rate(0.0, family=True),
        max(rate(c) for c in SMALL),
        min(rate(c) for c in LARGE),
        runs_still,
        runs,
        undecided_still,
        undecided,
    )


def _format(name: str, row: Sequence[float]) -> str:
    fa, family, half, detect, runs_still, runs, undecided_still, undecided = row
    return (
        f"| {name} | {fa:.2%} | {family:.2%} | {half:.2%} | {detect:.1%} | {runs_still:.2f} "
        f"| {runs:.2f} | {undecided_still:.2%} | {undecided:.2%} |"
    )


def goals(results: Results) -> list[str]:
    """perfgate's worst case against each goal, met or not, and its rates at the tolerance."""
    worst = worst_case([_row(shape, "perfgate", results) for shape in SHAPES])
    lines = ["", "**perfgate against the goals (worst case over the counted shapes)**", ""]
    for name, column, sense, bound in GOALS:
        value = worst[column]
        met = value <= bound if sense == "max" else value >= bound
        shown = f"{value:.2f}" if column == 5 else f"{value:.2%}"
        limit = f"{bound:g}" if column == 5 else f"{bound:.0%}"
        relation = "<=" if sense == "max" else ">="
        lines.append(f"- {name}: {shown} (goal {relation} {limit}): {'met' if met else 'NOT met'}")
    at_tolerance = [results[(shape.name, 1.0)] for shape in SHAPES if shape.counted]
    regressions = max(t.verdicts["perfgate"] / t.trials for t in at_tolerance)
    passes = max(t.passes / t.trials for t in at_tolerance)
    lines.append(
        f"- a change exactly at the tolerance: regression at most {regressions:.2%}, "
        f"pass at most {passes:.2%}"
    )
    return lines


def detail(results: Results) -> list[str]:
    """perfgate's regression rate, mean runs and inconclusive share at every change."""
    head = " | ".join(f"{c:g}x" for c in CHANGES)
    lines = [
        "",
        "**perfgate: regression verdicts / passes / mean runs / still inconclusive, per true "
        "slowdown (in tolerances)**",
        "",
    ]
    lines += [f"| noise shape | {head} |", "| --- |" + " ---: |" * len(CHANGES)]
    for shape in SHAPES:
        cells = [results[(shape.name, c)] for c in CHANGES]
        text = " | ".join(
            f"{t.verdicts['perfgate'] / t.trials:.1%} / {t.passes / t.trials:.1%} / "
            f"{t.runs / t.trials:.2f} / {t.inconclusive / t.trials:.0%}"
            for t in cells
        )
        lines.append(f"| {shape.name} | {text} |")
    return lines


def simulate(settings: Settings, trials: int, seed: int, jobs: int) -> Results:
    """Every (shape, change) cell of one setting, each from its own seed."""
    cells = [
        (shape, change, settings, trials, seed * 1000 + 100 * i + j)
        for i, shape in enumerate(SHAPES)
        for j, change in enumerate(CHANGES)
    ]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return {(name, change): tally for name, change, tally in pool.map(run_cell, cells)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="per shape and change")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--setting",
        choices=sorted(SETTINGS),
        action="append",
        help="simulate only this setting (repeatable); default: every one",
    )
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument(
        "--max-runs", type=int, default=3, help="the scenario's max_runs: runs in all"
    )
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--beta", type=float, default=DEFAULT_BETA)
    parser.add_argument(
        "--budget-runs",
        type=int,
        default=10,
        help="the runs a verdict may take in all (what 600 s of runner time allow the GPU "
        "scenario)",
    )
    parser.add_argument(
        "--noise-scale", type=float, default=1.0, help="multiply every shape's noise by this"
    )
    parser.add_argument(
        "--no-gpu",
        dest="gpu",
        action="store_false",
        help="leave out the GPU scenario on its measured noise (benchmarks/gate_quality_gpu.py)",
    )
    args = parser.parse_args(argv)
    for key in args.setting or list(SETTINGS):
        setting = SETTINGS[key]
        settings = Settings(
            args.noise_scale,
            setting.repeats,
            setting.baseline_runs,
            args.tolerance,
            args.max_runs,
            args.alpha,
            args.beta,
            args.budget_runs,
        )
        started = time.perf_counter()
        results = simulate(settings, args.trials, args.seed, args.jobs)
        elapsed = time.perf_counter() - started
        print(
            f"\n### {setting.name}\n\n{args.trials} trials per cell, tolerance "
            f"{args.tolerance:.0%}, max {args.max_runs} runs, alpha {args.alpha}, "
            f"beta {args.beta}, noise x{args.noise_scale}, seed {args.seed}; {elapsed:.0f} s"
        )
        print("\n".join(render(results) + goals(results) + detail(results)))
    if args.gpu:
        from gate_quality_gpu import report

        print("\n".join(report(args.trials, args.seed, args.jobs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
