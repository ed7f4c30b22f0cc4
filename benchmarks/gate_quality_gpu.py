"""The GPU scenario's verdicts on its measured noise: the goals of a gate that sees 6% on a GPU.

Run by ``python benchmarks/gate_quality.py`` (its last section) or on its own:

    python benchmarks/gate_quality_gpu.py --trials 2000
    python benchmarks/gate_quality_gpu.py --history OUT/history.db   # on a proof's launches

``--history`` takes each gated metric's noise from the ``--no-gate`` launches of a history
(benchmarks/gpu_gate_proof.sh's series; benchmarks/launch_noise.py computes it the same way)
instead of ``GPU_NOISE``, so that a GPU session's launches answer the goals below at once.

What it simulates: ``embedded-large-gpu`` on one H200, each gated metric with the noise its
committed launches measured (no new measurement: ``GPU_NOISE`` cites the record of each), an
approved baseline of ``baseline_runs`` launches of 5 repeats, and a change under test of
``GPU_CHANGES``: none; a slowdown of every decode cycle sized to cost 6% of end-to-end tok/s
(what ``--debug-slow-phase cycle=F`` injects; ``F`` from the record's figures below); verify 2%
slower (``verify=0.02``). Each change moves the metrics it moves in the record's proportions.
perfgate runs the session's whole loop on each (perfgate.gate.planning plans the runs from the
baseline's spread, capped at the scenario's max_runs and at what 600 s of runner time allow),
and the runner time of a verdict is its runs times what a run took on the H200 (the median
launch on average, the slowest for the most runs).

The settings: the tolerances perfgate.toml had first, the goal's, the chosen ones (what
perfgate.toml set before the scenario's prefill graphs: tok/s 7%, speedup 10%), the shipped
ones (perfgate.toml now: verify and accept length 1%, and tok/s, speedup and decode_tok_s as
`baseline update` derives them from the approved launches: 3%, or wider where their spread
asks; ``derived``), the goal's on launches whose tok/s and speedup scatter 0.5, 0.35
and 0.25 times as much as measured (``LAUNCH_SCALES``), the rest as measured: what a cure of
the launch spread at its source must reach for the goal's tolerances to hold; and the shipped
tolerances against 5 approved launches with every verdict judged on its first run alone
(max_runs 1) or on at most 3: what benchmarks/gpu_gate_proof.sh measures with QUICK=1 (and
MAX_RUNS=3), where a session's device time cannot hold the runs the shipped settings plan.

The goals of a gate that catches the seed's 6% on a GPU: with no change, false
alarms at most 1% on any gated metric and at most 2% inconclusive; a 6% loss of tok/s caught
as a regression in at least 95% of runs; a 2% slower verify in at least 99%; at most 10
minutes of runner time a verdict; tolerances of at most 3% on tok/s and speedup and 1% on
verify.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate_quality import Settings, Shape, draw_run, session_loop

from perfgate.config import load_config
from perfgate.gate import DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_TOLERANCE, Status
from perfgate.gate.planning import supported_tolerance

REPO = Path(__file__).resolve().parent.parent
RECORD = "benchmarks/results/h200-real-weights.md"
FIFTH = f"{RECORD}, its first section (2026-12-01, fifth: ten launches, 2026-12-01-ends/noise.md)"


@dataclass(frozen=True)
class Noise:
    """A metric's measured spread (sd of the log): a repeat within a run, a run between launches."""

    within_sd: float
    between_sd: float
    source: str


GPU_NOISE: dict[str, Noise] = {
    "output_tok_s": Noise(0.0091, 0.0263, FIFTH),
    "speedup": Noise(0.0154, 0.0395, FIFTH),
    "verify_ms": Noise(0.0008, 0.0010, FIFTH),
    "accept_length": Noise(0.0, 0.0, FIFTH),
    # The latest engine's per-repeat cycle times were not kept; the two sections that kept
    # them (samples.csv): eleven launches of 2026-12-01 (its "ten launches, a first
    # baseline" section) 0.98% between and 1.20% within, six of 2026-11-30 1.65% and 0.93%.
    # Each the worse of the two.
    "decode_tok_s": Noise(
        0.0120,
        0.0165,
        f"{RECORD}: 1000 x accept_length / cycle_ms per repeat from h200-real-weights/"
        "2026-12-01/samples.csv and h200-real-weights/samples.csv, the worse spread of each",
    ),
}
GATED_NOW = ("output_tok_s", "verify_ms", "accept_length", "speedup")
GATED_WITH_DECODE = (*GATED_NOW, "decode_tok_s")

# A spec repeat of the GPU scenario, from the fifth section: 8 prompts x 256 tokens at 11680
# tok/s; 256 / 3.765 cycles of 2.086 ms (its sweep at 3 steps), verify 1.380 ms of each.
REPEAT_MS = 8 * 256 / 11680 * 1000
DECODE_MS = 256 / 3.765 * 2.086
CYCLE_MS, VERIFY_MS = 2.086, 1.380
# The cycle slowdown that costs 6% of tok/s: repeat / (repeat + F * decode) = 0.94.
CYCLE_FOR_6 = (1 / 0.94 - 1) * REPEAT_MS / DECODE_MS
_VERIFY_CYCLE = 0.02 * VERIFY_MS / CYCLE_MS  # verify +2% lengthens the cycle by this share
_VERIFY_TOK_S = REPEAT_MS / (REPEAT_MS + _VERIFY_CYCLE * DECODE_MS)

# Per change, the true factor on each metric that moves (in its own units: verify_ms x 1.02).
GPU_CHANGES: dict[str, dict[str, float]] = {
    "unchanged": {},
    f"tok/s -6% (cycle +{CYCLE_FOR_6:.1%})": {
        "output_tok_s": 0.94,
        "speedup": 0.94,
        "decode_tok_s": 1 / (1 + CYCLE_FOR_6),
    },
    "verify +2%": {
        "verify_ms": 1.02,
        "decode_tok_s": 1 / (1 + _VERIFY_CYCLE),
        "output_tok_s": _VERIFY_TOK_S,
        "speedup": _VERIFY_TOK_S,
    },
}
RUN_S = 52.0  # a run's runner time on the H200: the ten launches took 49-56 s, median 52
RUN_S_MOST = 56.0  # the slowest of them: what the most runs of a verdict are costed at
BUDGET_RUNS = 10  # what perfgate plans within 600 s at 46 s of servers + 10 s a run


@dataclass(frozen=True)
class GpuSetting:
    name: str
    tolerances: Mapping[str, float]
    gated: tuple[str, ...]
    baseline_runs: int
    max_runs: int = 10  # the scenario's max_runs (perfgate.toml sets 10 for the GPU scenario)
    # The spread of tok/s and speedup between launches (the host's state, which the decode
    # cycles' own time does not carry) times this: what a cure at the source would leave.
    launch_scale: float = 1.0
    noise: Mapping[str, Noise] | None = None  # None: GPU_NOISE


# The GPU scenario's tolerances as perfgate.toml set them before its prefill graphs: the
# tightest round figures at which these goals hold on the H200's noise of GPU_NOISE (tok/s and
# speedup 7% and 10%, not the 3% the goals ask: see gate-quality.md), verify 1%, decode_tok_s
# 3.5%. perfgate.toml now leaves tok/s, speedup and decode_tok_s to `baseline update`
# (shipped(), derived()).
CHOSEN = {
    "output_tok_s": 0.07,
    "speedup": 0.10,
    "accept_length": 0.01,
    "verify_ms": 0.01,
    "decode_tok_s": 0.035,
}


def supported(
    baseline_runs: int, measured: Mapping[str, Noise] | None = None, max_runs: int = BUDGET_RUNS
) -> dict[str, float]:
    """Per metric, the tightest tolerance its measured spread supports alone within max_runs
    (perfgate.gate.planning.supported_tolerance, what `baseline update` derives)."""
    found = {}
    for metric, noise in (measured or GPU_NOISE).items():
        sd = math.hypot(noise.between_sd, noise.within_sd * math.sqrt(math.pi / 10))
        found[metric] = supported_tolerance(
            max(sd, 0.001), baseline_runs, alpha=DEFAULT_ALPHA, beta=DEFAULT_BETA,
            max_runs=max_runs,
        )  # fmt: skip
    return found


def gpu_settings(noise: Mapping[str, Noise] | None = None) -> tuple[GpuSetting, ...]:
    """Every setting simulated, on ``noise`` (None: GPU_NOISE, the committed launches')."""
    return tuple(replace(s, noise=noise) for s in _settings(noise))


@cache
def shipped() -> tuple[dict[str, float], tuple[str, ...]]:
    """perfgate.toml's GPU scenario as shipped: the tolerances it sets (since its prefill
    graphs, 2026-12-06, the GPU's own figures), and the gated metrics it leaves to
    `baseline update` to derive."""
    scenario = load_config(REPO / "perfgate.toml").scenarios["embedded-large-gpu"]
    tolerances = dict(scenario.tolerances)
    return tolerances, tuple(m for m in scenario.gated if m not in tolerances)


def derived(
    baseline_runs: int, noise: Mapping[str, Noise] | None = None, max_runs: int = BUDGET_RUNS
) -> dict[str, float]:
    """The GPU scenario's tolerances as shipped (shipped()), with the metrics perfgate.toml
    leaves out as `baseline update` derives them from the approved launches: the default 3%,
    or wider where their spread supports no sharper verdict within max_runs (supported();
    gpu_gate_proof.sh approves with its MAX_RUNS copy of the config, so QUICK's are wider)."""
    found = supported(baseline_runs, noise, max_runs)
    tolerances, left = shipped()
    return {**tolerances, **{m: max(DEFAULT_TOLERANCE, found[m]) for m in left}}


def _settings(noise: Mapping[str, Noise] | None = None) -> tuple[GpuSetting, ...]:
    today = {"output_tok_s": 0.10, "speedup": 0.125, "accept_length": 0.05, "verify_ms": 0.03}
    # The goal sets tok/s, speedup (3%) and verify (1%); decode_tok_s keeps the chosen 3.5%.
    goal = {**CHOSEN, "output_tok_s": 0.03, "speedup": 0.03}
    return (
        GpuSetting("perfgate.toml before, 5 approved, max_runs 3", today, GATED_NOW, 5, 3),
        GpuSetting("the goal's tolerances, 10 approved", goal, GATED_WITH_DECODE, 10),
        GpuSetting("the goal's tolerances, 20 approved", goal, GATED_WITH_DECODE, 20),
        GpuSetting("chosen, 10 approved", CHOSEN, GATED_WITH_DECODE, 10),
        GpuSetting("chosen, 20 approved", CHOSEN, GATED_WITH_DECODE, 20),
        GpuSetting("shipped (derived), 10 approved", derived(10, noise), GATED_WITH_DECODE, 10),
        GpuSetting("shipped (derived), 20 approved", derived(20, noise), GATED_WITH_DECODE, 20),
        *(
            GpuSetting(
                f"the goal's, 10 approved, launches x{scale:g}",
                goal,
                GATED_WITH_DECODE,
                10,
                launch_scale=scale,
            )
            for scale in LAUNCH_SCALES
        ),
        GpuSetting(
            "shipped, 5 approved, max_runs 1 (QUICK=1)",
            derived(5, noise, 1),
            GATED_WITH_DECODE,
            5,
            1,
        ),
        GpuSetting(
            "shipped, 5 approved, max_runs 3", derived(5, noise, 3), GATED_WITH_DECODE, 5, 3
        ),
    )


# What the goals need of the launches: the spread of tok/s and speedup between launches
# scaled by these (the rest as measured), at the goal's tolerances.
LAUNCH_SCALES = (0.5, 0.35, 0.25)
HOST_CARRIED = ("output_tok_s", "speedup")


def noise_of(setting: GpuSetting) -> dict[str, Noise]:
    """The noise a setting simulates: the measured, tok/s and speedup's launches scaled."""
    return {
        m: Noise(n.within_sd, n.between_sd * setting.launch_scale, n.source)
        if m in HOST_CARRIED
        else n
        for m, n in (setting.noise or GPU_NOISE).items()
    }


def history_noise(db: Path, scenario: str) -> dict[str, Noise]:
    """Each gated metric's noise over the ``--no-gate`` launches of ``scenario`` in ``db``
    (the speculative server's figures, speedup among them), as launch_noise.py reports it."""
    from launch_noise import samples_of, spreads

    runs, samples = samples_of(db, scenario, unjudged=True)
    if len(runs) < 2:
        raise ValueError(f"{db}: {len(runs)} --no-gate launches of {scenario}; two at least")
    found = spreads(samples)
    source = f"{db.name}: {len(runs)} launches of {scenario} (runs {runs[0]}-{runs[-1]})"
    noise = {}
    for metric in GATED_WITH_DECODE:
        if (metric, "spec") not in found:
            raise ValueError(f"{db}: no {metric} recorded for {scenario}'s launches")
        _, between, within = found[(metric, "spec")]
        noise[metric] = Noise(within, between, source)
    return noise


@dataclass
class GpuTally:
    trials: int = 0
    regressions: dict[str, int] = field(default_factory=dict)  # per metric
    caught: int = 0  # the scenario's status is regression
    inconclusive: int = 0  # the scenario's status is inconclusive (no regression)
    undecided: dict[str, int] = field(default_factory=dict)  # per metric: inconclusive
    runs: int = 0
    most_runs: int = 0


def run_gpu_cell(args: tuple[GpuSetting, str, int, int]) -> tuple[str, str, GpuTally]:
    setting, change, trials, seed = args
    rng = random.Random(seed)
    noise = noise_of(setting)
    shapes = {m: Shape(m, noise[m].within_sd, noise[m].between_sd) for m in noise}
    factors = GPU_CHANGES[change]
    settings = Settings(1.0, 5, setting.baseline_runs, 0.0, setting.max_runs, DEFAULT_ALPHA,
                        DEFAULT_BETA, budget_runs=BUDGET_RUNS)  # fmt: skip

    def run(changed: bool) -> dict[str, list[float]]:
        return {
            m: draw_run(shapes[m], rng, 5, factors.get(m, 1.0) if changed else 1.0)
            for m in setting.gated
        }

    tally = GpuTally()
    for _ in range(trials):
        baseline: dict[str, list[list[float]]] = {m: [] for m in setting.gated}
        for _ in range(setting.baseline_runs):
            for m, values in run(False).items():
                baseline[m].append(values)
        statuses, runs = session_loop(
            baseline, run(True), lambda: run(True), dict(setting.tolerances), setting.gated,
            settings,
        )  # fmt: skip
        tally.trials += 1
        for metric, status in statuses.items():
            tally.regressions[metric] = tally.regressions.get(metric, 0) + (
                status is Status.REGRESSION
            )
        regression = Status.REGRESSION in statuses.values()
        tally.caught += regression
        tally.inconclusive += not regression and Status.INCONCLUSIVE in statuses.values()
        for metric, status in statuses.items():
            if status is Status.INCONCLUSIVE:
                tally.undecided[metric] = tally.undecided.get(metric, 0) + 1
        tally.runs += runs
        tally.most_runs = max(tally.most_runs, runs)
    return setting.name, change, tally


def simulate_gpu(
    trials: int, seed: int, jobs: int, noise: Mapping[str, Noise] | None = None
) -> dict[tuple[str, str], GpuTally]:
    cells = [
        (setting, change, trials, seed * 1000 + 500 + 10 * i + j)
        for i, setting in enumerate(gpu_settings(noise))
        for j, change in enumerate(GPU_CHANGES)
    ]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return {(name, change): t for name, change, t in pool.map(run_gpu_cell, cells)}


def render_gpu(
    results: Mapping[tuple[str, str], GpuTally], noise: Mapping[str, Noise] | None = None
) -> list[str]:
    """Per setting: its tolerances, then per change the rates, runs and runner time."""
    lines = [
        "",
        "| setting | tolerances (tok/s, speedup, verify, decode) | change | regression | "
        "inconclusive | inconclusive on | false alarms, worst metric | caught by | "
        "runs, mean / most | runner time, mean / most |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | --- | ---: | ---: |",
    ]
    for setting in gpu_settings(noise):
        t = setting.tolerances
        shown = " / ".join(
            f"{t[m]:.1%}" if m in t else "-"
            for m in ("output_tok_s", "speedup", "verify_ms", "decode_tok_s")
        )
        for change in GPU_CHANGES:
            tally = results[(setting.name, change)]
            n = tally.trials
            worst = max(tally.regressions.items(), key=lambda kv: kv[1])
            false = f"{worst[1] / n:.2%} ({worst[0]})" if change == "unchanged" else "-"
            by = ", ".join(
                f"{m} {c / n:.0%}" for m, c in tally.regressions.items() if c / n >= 0.005
            )
            on = ", ".join(f"{m} {c / n:.1%}" for m, c in tally.undecided.items() if c / n >= 0.001)
            runs = tally.runs / n
            lines.append(
                f"| {setting.name} | {shown} | {change} | {tally.caught / n:.2%} | "
                f"{tally.inconclusive / n:.2%} | {on or '-'} | {false} | {by or '-'} | "
                f"{runs:.2f} / {tally.most_runs} | {runs * RUN_S:.0f} s / "
                f"{tally.most_runs * RUN_S_MOST:.0f} s |"
            )
    return lines


def goals_gpu(
    results: Mapping[tuple[str, str], GpuTally], noise: Mapping[str, Noise] | None = None
) -> list[str]:
    """Each setting against each goal: met or not."""
    changes = list(GPU_CHANGES)
    lines = ["", "**Against the goals**", ""]
    for setting in gpu_settings(noise):
        still = results[(setting.name, changes[0])]
        loss = results[(setting.name, changes[1])]
        verify = results[(setting.name, changes[2])]
        n = still.trials
        t = setting.tolerances
        most_s = max(r.most_runs for r in (still, loss, verify)) * RUN_S_MOST
        checks = [
            ("tok/s and speedup tolerance <= 3%", max(t["output_tok_s"], t["speedup"]) <= 0.03),
            ("verify tolerance <= 1%", t["verify_ms"] <= 0.01),
            (
                f"false alarms <= 1% per metric ({max(still.regressions.values()) / n:.2%})",
                max(still.regressions.values()) / n <= 0.01,
            ),
            (f"inconclusive <= 2% ({still.inconclusive / n:.2%})", still.inconclusive / n <= 0.02),
            (f"tok/s -6% caught >= 95% ({loss.caught / n:.1%})", loss.caught / n >= 0.95),
            (f"verify +2% caught >= 99% ({verify.caught / n:.1%})", verify.caught / n >= 0.99),
            (f"runner time <= 600 s ({most_s:.0f} s)", most_s <= 600),
        ]
        met = "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks)
        lines.append(f"- {setting.name}: {met}")
    return lines


def noise_lines(measured: Mapping[str, Noise] | None = None) -> list[str]:
    """The measured noise, and the tolerance each spread supports alone (10 / 20 approved)."""
    lines = [
        "",
        "| metric | within a run | between launches | supported alone, 10 / 20 approved "
        "| measured in |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    ten, twenty = supported(10, measured), supported(20, measured)
    for metric, noise in (measured or GPU_NOISE).items():
        lines.append(
            f"| {metric} | {noise.within_sd:.2%} | {noise.between_sd:.2%} | "
            f"{ten[metric]:.1%} / {twenty[metric]:.1%} | {noise.source} |"
        )
    return lines


def report(
    trials: int, seed: int, jobs: int, measured: Mapping[str, Noise] | None = None
) -> list[str]:
    """The section: the noise, every setting's rates per change, each against the goals."""
    started = time.perf_counter()
    results = simulate_gpu(trials, seed, jobs, measured)
    elapsed = time.perf_counter() - started
    head = [
        "",
        "### The GPU scenario on its measured noise",
        "",
        f"{trials} trials per cell, seed {seed}, at most {BUDGET_RUNS} runs a verdict ("
        f"{RUN_S:.0f} s a run on average, {RUN_S_MOST:.0f} s at most; fewer where a setting "
        f"says max_runs), alpha {DEFAULT_ALPHA}, "
        f"beta {DEFAULT_BETA}; {elapsed:.0f} s. "
        f"The tok/s change slows every cycle by {CYCLE_FOR_6:.1%} (decode_tok_s "
        f"{1 / (1 + CYCLE_FOR_6) - 1:+.1%}); verify +2% moves decode_tok_s "
        f"{1 / (1 + _VERIFY_CYCLE) - 1:+.2%} and tok/s and speedup {_VERIFY_TOK_S - 1:+.2%}.",
    ]
    return (
        head + noise_lines(measured) + render_gpu(results, measured) + goals_gpu(results, measured)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--history",
        type=Path,
        help="take the noise from this SQLite history's --no-gate launches (a proof's series)",
    )
    parser.add_argument("--scenario", default="embedded-large-gpu", help="with --history")
    args = parser.parse_args(argv)
    measured = None
    if args.history is not None:
        if not args.history.is_file():
            print(f"--history {args.history}: no such file", file=sys.stderr)
            return 64
        try:
            measured = history_noise(args.history, args.scenario)
        except ValueError as error:
            print(f"--history: {error}", file=sys.stderr)
            return 64
    print("\n".join(report(args.trials, args.seed, args.jobs, measured)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
