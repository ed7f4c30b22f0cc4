"""The fewest runs any gate can take to detect a change carried by a slow share of repeats.

    python benchmarks/slow_share_bound.py

In ``benchmarks/gate_quality.py``'s ``slow share of repeats`` shape, a change of ``c``
tolerances slows exactly ``k`` of the ``n`` repeats of every current run (2 of 5, or 1 of
3), each by ``depth = -(n / k) * log(1 - c * tolerance)`` on the log scale, so a run's mean
moves by the change while its median stays put. How soon can a test claim that regression
at its level, if it must hold that level whichever way a change within the tolerance is
spread over the repeats?

One such way (the null): every repeat is slow by the same ``depth`` independently, with the
chance ``q = -log(1 - tolerance) / depth`` that puts the mean loss exactly at the tolerance.
Given which repeats are slow, both worlds draw alike; they differ only in how many are
slow, ``k`` in every run for the change, binomial for the null. So the likelihood ratio of
``j`` runs is the same, ``1 / p**j`` with ``p = C(n, k) q**k (1 - q)**(n - k)``, wherever
the change can land, and by Neyman and Pearson a test that claims a regression within its
first ``j`` looks with a chance of at most ``A_j`` under the null detects the change within
them with a chance of at most ``min(1, A_j / p**j)``. To detect a share ``d`` of changes
by the last look, at least ``d - min(1, A_j / p**j)`` of them are still measured after look
``j``, so the expected runs are at least ``1 + sum over j < M of max(0, d - that)``.

``A_j`` is the metric's level spent by look ``j``: Holm's first level over the four gated
metrics (``alpha / 4``, the most one metric of an unchanged family gets) times the shares of
the looks so far (perfgate.gate.looks); "free" spends it over the looks in the way that
needs the fewest runs, under the constraint that the last look keeps the share named.

perfgate's mean test does not belong to that class: it judges the runs' means, and holds
its level where they scatter normally. ``--trials N`` measures what it does under the null
above (``output_tok_s`` only; the other three metrics unchanged, the noise of
gate_quality.py's ``slow share of repeats`` shape): its regression verdicts, against the
scenario's alpha and Holm's first level.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate_quality import CHANGED, GATED, SHAPES, Settings, draw_run, gate_trial

from perfgate.gate import DEFAULT_ALPHA, DEFAULT_BETA, Status
from perfgate.gate.looks import alpha_share

CHANGES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # gate_quality.py's grid
DETECTED = (2.0, 3.0, 4.0)  # where the goal asks for detection
METRICS = 4


def support_chance(repeats: int, carriers: int, change: float, tolerance: float) -> float:
    """Under the null, the chance that one run has exactly ``carriers`` slow repeats."""
    depth = -(repeats / carriers) * math.log1p(-change * tolerance)
    q = -math.log1p(-tolerance) / depth
    return math.comb(repeats, carriers) * q**carriers * (1.0 - q) ** (repeats - carriers)


def fewest_runs(p: float, spent: Sequence[float], detect: float) -> float:
    """The least expected runs to detect a share ``detect`` by the last look (inf if none).

    ``spent[j]`` is the level spent by look ``j + 1``; ``p`` the null's chance of one run
    that looks like the change (:func:`support_chance`).
    """
    power = [min(1.0, level / p ** (j + 1)) for j, level in enumerate(spent)]
    if power[-1] < detect:
        return math.inf
    return 1.0 + sum(max(0.0, detect - w) for w in power[:-1])


def cumulative(shares: Sequence[float], level: float) -> list[float]:
    """The level spent by each look, from each look's share of ``level``."""
    total, spent = 0.0, []
    for share in shares:
        total += share * level
        spent.append(total)
    return spent


def grid_bound(
    repeats: int,
    carriers: int,
    shares: Sequence[float],
    level: float,
    tolerance: float,
    detect: float,
) -> tuple[float, list[float]]:
    """The grid's mean runs if every change below DETECTED took one run, and the rest."""
    spent = cumulative(shares, level)
    detected = [
        fewest_runs(support_chance(repeats, carriers, c, tolerance), spent, detect)
        for c in DETECTED
    ]
    return (len(CHANGES) - len(DETECTED) + sum(detected)) / len(CHANGES), detected


def best_shares(
    repeats: int, carriers: int, level: float, tolerance: float, detect: float, last: float
) -> tuple[float, list[float], tuple[float, float, float]]:
    """The three-look spending (last look at least ``last``) with the lowest grid bound."""
    best: tuple[float, list[float], tuple[float, float, float]] | None = None
    steps = 100
    for first in range(steps + 1):
        for middle in range(steps + 1 - first):
            shares = (first / steps, middle / steps, 1.0 - (first + middle) / steps)
            if shares[2] < last - 1e-9:
                continue
            mean, detected = grid_bound(repeats, carriers, shares, level, tolerance, detect)
            if best is None or mean < best[0]:
                best = (mean, detected, shares)
    assert best is not None
    return best


def null_regressions(args: tuple[int, float, int, int]) -> tuple[int, float, float]:
    """perfgate's share of regression verdicts when each repeat is slow by ``depth`` with
    the chance that puts the mean loss exactly at the tolerance (5 approved runs, 3% tolerance,
    at most 3 runs, the default alpha and beta)."""
    repeats, depth, trials, seed = args
    tolerance = 0.03
    calm = next(shape for shape in SHAPES if shape.name == "slow share of repeats")
    calm = replace(calm, change_share=1.0)
    share = -math.log1p(-tolerance) / depth
    slow = replace(calm, slow_chance=share, slow_by=(-math.expm1(-depth),) * 2)
    settings = Settings(1.0, repeats, 5, tolerance, 3, DEFAULT_ALPHA, DEFAULT_BETA)
    rng = random.Random(seed)

    def current() -> dict[str, list[float]]:
        return {m: draw_run(slow if m == CHANGED else calm, rng, repeats, 1.0) for m in GATED}

    regressions = 0
    for _ in range(trials):
        baseline = {m: [draw_run(calm, rng, repeats, 1.0) for _ in range(5)] for m in GATED}
        status, _, _ = gate_trial(baseline, current(), current, settings)
        regressions += status is Status.REGRESSION
    return repeats, depth, regressions / trials


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--detect", type=float, default=0.95, help="the detection goal")
    parser.add_argument("--last", type=float, default=0.6, help="the least share of the last look")
    parser.add_argument(
        "--trials", type=int, default=0, help="also measure perfgate under the null (per depth)"
    )
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args(argv)
    level = args.alpha / METRICS
    gate = (alpha_share(1, 3), alpha_share(2, 3), alpha_share(3, 3))
    print(
        "| repeats (slow of them) | spending of alpha over 3 looks | fewest runs at 2x / 3x / 4x "
        "| grid mean, every other change in 1 run |"
    )
    print("| --- | --- | --- | ---: |")
    for repeats, carriers in ((5, 2), (3, 1)):
        mean, detected = grid_bound(repeats, carriers, gate, level, args.tolerance, args.detect)
        rows = [("perfgate's", mean, detected, gate)]
        for last, name in ((args.last, f"free, last >= {args.last:.0%}"), (0.0, "free")):
            mean, detected, shares = best_shares(
                repeats, carriers, level, args.tolerance, args.detect, last
            )
            rows.append((name, mean, detected, shares))
        for name, mean, detected, shares in rows:
            spend = " / ".join(f"{s:.0%}" for s in shares)
            runs = " / ".join(f"{r:.2f}" for r in detected)
            print(f"| {repeats} ({carriers}) | {name}: {spend} | {runs} | {mean:.2f} |")
    if args.trials:
        print_null(args.trials, args.seed, args.tolerance)
    return 0


def print_null(trials: int, seed: int, tolerance: float) -> None:
    """perfgate's regression verdicts under the null, at the depths of 1.5x to 4x changes."""
    cells = [
        (repeats, -(repeats / carriers) * math.log1p(-c * tolerance), trials, seed + 10 * i + j)
        for i, (repeats, carriers) in enumerate(((5, 2), (3, 1)))
        for j, c in enumerate((1.0, 1.5, 2.0, 3.0, 4.0))
    ]
    print(f"\nperfgate under the null, {trials} trials per cell, seed {seed}\n")
    print("| repeats | slow repeats: depth, chance | regression verdicts |")
    print("| --- | --- | ---: |")
    with ProcessPoolExecutor(max_workers=2) as pool:
        for repeats, depth, rate in pool.map(null_regressions, cells):
            share = -math.log1p(-tolerance) / depth
            print(f"| {repeats} | {-math.expm1(-depth):.1%} slower, {share:.1%} | {rate:.2%} |")


if __name__ == "__main__":
    sys.exit(main())
