"""The GPU scenario's verdicts on its measured noise: the goals of a gate that sees 6% on a GPU.

Run by ``python benchmarks/gate_quality.py`` (its last section) or on its own:

    python benchmarks/gate_quality_gpu.py --trials 2000

What it simulates: ``embedded-large-gpu`` on one H200, each gated metric with the noise its
committed launches measured (no new measurement: ``GPU_NOISE`` cites the record of each), an
approved baseline of ``baseline_runs`` launches of 5 repeats, and a change under test of
``GPU_CHANGES``: none; a slowdown of every decode cycle sized to cost 6% of end-to-end tok/s
(what ``--debug-slow-phase cycle=F`` injects; ``F`` from the record's figures below); verify 2%
slower (``verify=0.02``). Each change moves the metrics it moves in the record's proportions.
perfgate runs the session's whole loop on each (perfgate.gate.planning plans the runs from the
baseline's spread, capped at what 600 s of runner time allow), and the runner time of a
verdict is its runs times what a run took on the H200.

The goals (the issue "a gate that catches the seed's 6% on a GPU"): with no change, false
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate_quality import Settings, Shape, draw_run, session_loop

from perfgate.gate import DEFAULT_ALPHA, DEFAULT_BETA, Status
from perfgate.gate.planning import supported_tolerance

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
RUN_S = 52.0  # a run's runner time on the H200: the ten launches took 48-56 s, median 52
BUDGET_RUNS = 10  # what perfgate plans within 600 s at 46 s of servers + 10 s a run


@dataclass(frozen=True)
class GpuSetting:
    name: str
    tolerances: Mapping[str, float]
    gated: tuple[str, ...]
    baseline_runs: int
    max_runs: int = 10  # the scenario's max_runs (perfgate.toml sets 10 for the GPU scenario)


# The GPU scenario's tolerances as perfgate.toml sets them now: the tightest round figures at
# which these goals hold on the measured noise (tok/s and speedup 7% and 10%, not the 3% the
# goals ask: see gate-quality.md), verify 1%, decode_tok_s 3.5%.
CHOSEN = {
    "output_tok_s": 0.07,
    "speedup": 0.10,
    "accept_length": 0.01,
    "verify_ms": 0.01,
    "decode_tok_s": 0.035,
}


def supported(baseline_runs: int) -> dict[str, float]:
    """Per metric, the tightest tolerance its measured spread supports alone within the
    budget (perfgate.gate.planning.supported_tolerance, what `baseline update` derives)."""
    found = {}
    for metric, noise in GPU_NOISE.items():
        sd = math.hypot(noise.between_sd, noise.within_sd * math.sqrt(math.pi / 10))
        found[metric] = supported_tolerance(
            max(sd, 0.001), baseline_runs, alpha=DEFAULT_ALPHA, beta=DEFAULT_BETA,
            max_runs=BUDGET_RUNS,
        )  # fmt: skip
    return found


def gpu_settings() -> tuple[GpuSetting, ...]:
    today = {"output_tok_s": 0.10, "speedup": 0.125, "accept_length": 0.05, "verify_ms": 0.03}
    goal = {**CHOSEN, "output_tok_s": 0.03, "speedup": 0.03, "decode_tok_s": 0.03}
    return (
        GpuSetting("perfgate.toml before, 5 approved, max_runs 3", today, GATED_NOW, 5, 3),
        GpuSetting("the goal's tolerances, 10 approved", goal, GATED_WITH_DECODE, 10),
        GpuSetting("the goal's tolerances, 20 approved", goal, GATED_WITH_DECODE, 20),
        GpuSetting("chosen, 10 approved", CHOSEN, GATED_WITH_DECODE, 10),
        GpuSetting("chosen, 20 approved", CHOSEN, GATED_WITH_DECODE, 20),
    )


@dataclass
class GpuTally:
    trials: int = 0
    regressions: dict[str, int] = field(default_factory=dict)  # per metric
    caught: int = 0  # the scenario's status is regression
    inconclusive: int = 0  # the scenario's status is inconclusive (no regression)
    runs: int = 0
    most_runs: int = 0


def run_gpu_cell(args: tuple[GpuSetting, str, int, int]) -> tuple[str, str, GpuTally]:
    setting, change, trials, seed = args
    rng = random.Random(seed)
    shapes = {m: Shape(m, GPU_NOISE[m].within_sd, GPU_NOISE[m].between_sd) for m in GPU_NOISE}
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
        baseline = {m: [] for m in setting.gated}
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
        tally.runs += runs
        tally.most_runs = max(tally.most_runs, runs)
    return setting.name, change, tally


def simulate_gpu(trials: int, seed: int, jobs: int) -> dict[tuple[str, str], GpuTally]:
    cells = [
        (setting, change, trials, seed * 1000 + 500 + 10 * i + j)
        for i, setting in enumerate(gpu_settings())
        for j, change in enumerate(GPU_CHANGES)
    ]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return {(name, change): t for name, change, t in pool.map(run_gpu_cell, cells)}


def render_gpu(results: Mapping[tuple[str, str], GpuTally]) -> list[str]:
    """Per setting: its tolerances, then per change the rates, runs and runner time."""
    lines = [
        "",
        "| setting | tolerances (tok/s, speedup, verify, decode) | change | regression | "
        "inconclusive | false alarms, worst metric | caught by | runs, mean / most | "
        "runner time, mean / most |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for setting in gpu_settings():
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
            runs = tally.runs / n
            lines.append(
                f"| {setting.name} | {shown} | {change} | {tally.caught / n:.2%} | "
                f"{tally.inconclusive / n:.2%} | {false} | {by or '-'} | "
                f"{runs:.2f} / {tally.most_runs} | {runs * RUN_S:.0f} s / "
                f"{tally.most_runs * RUN_S:.0f} s |"
            )
    return lines


def goals_gpu(results: Mapping[tuple[str, str], GpuTally]) -> list[str]:
    """Each setting against each goal: met or not."""
    changes = list(GPU_CHANGES)
    lines = ["", "**Against the goals**", ""]
    for setting in gpu_settings():
        still = results[(setting.name, changes[0])]
        loss = results[(setting.name, changes[1])]
        verify = results[(setting.name, changes[2])]
        n = still.trials
        t = setting.tolerances
        most_s = max(r.most_runs for r in (still, loss, verify)) * RUN_S
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


def noise_lines() -> list[str]:
    """The measured noise, and the tolerance each spread supports alone (10 / 20 approved)."""
    lines = [
        "",
        "| metric | within a run | between launches | supported alone, 10 / 20 approved "
        "| measured in |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    ten, twenty = supported(10), supported(20)
    for metric, noise in GPU_NOISE.items():
        lines.append(
            f"| {metric} | {noise.within_sd:.2%} | {noise.between_sd:.2%} | "
            f"{ten[metric]:.1%} / {twenty[metric]:.1%} | {noise.source} |"
        )
    return lines


def report(trials: int, seed: int, jobs: int) -> list[str]:
    started = time.perf_counter()
    results = simulate_gpu(trials, seed, jobs)
    elapsed = time.perf_counter() - started
    head = [
        "",
        "### The GPU scenario on its measured noise",
        "",
        f"{trials} trials per cell, seed {seed}, at most {BUDGET_RUNS} runs a verdict ("
        f"{RUN_S:.0f} s a run; 3 where a setting says max_runs 3), alpha {DEFAULT_ALPHA}, "
        f"beta {DEFAULT_BETA}; {elapsed:.0f} s. "
        f"The tok/s change slows every cycle by {CYCLE_FOR_6:.1%} (decode_tok_s "
        f"{1 / (1 + CYCLE_FOR_6) - 1:+.1%}); verify +2% moves decode_tok_s "
        f"{1 / (1 + _VERIFY_CYCLE) - 1:+.2%} and tok/s and speedup {_VERIFY_TOK_S - 1:+.2%}.",
    ]
    return head + noise_lines() + render_gpu(results) + goals_gpu(results)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    print("\n".join(report(args.trials, args.seed, args.jobs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
