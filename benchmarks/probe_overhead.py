"""What the probe costs: tok/s with the probe over tok/s without it, in one session.

    python benchmarks/probe_overhead.py --scenario embedded-large-gpu --out results/probe
    python benchmarks/probe_overhead.py --smoke --out /tmp/probe   # tiny models, CPU, seconds

Fresh server launches alternate, probe on and probe off, in pairs whose order alternates too
(on-off, off-on, on-off, ...: drift over the session cancels within a pair and between
pairs). Each launch is measured as a gate run measures a server (``perfgate.measure``: warm
up, then the scenario's repeats); the probe-off launches run with ``PERFGATE_PROBE_DIR``
empty, so nothing of the probe loads in them. Each pair gives one ratio of median tok/s; their
geometric mean and its 95% interval (Student's t over the pairs' log ratios) say what the
probe costs, against the design's goal of at most 0.5% of tok/s.

Writes ``probe-overhead.json`` and ``probe-overhead.md`` to --out. Needs perfgate importable
(``PYTHONPATH=.`` from a checkout).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.config import Scenario, load_config
from perfgate.engines.validate import preflight
from perfgate.errors import ExitCode, PerfgateError
from perfgate.measure import measure_mode
from perfgate.profile.overhead import paired_ratio

GOAL = 0.005  # the probe may take at most 0.5% of tok/s
MIN_PAIRS = 2  # a budget may cut the pairs short, never below this


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the two files")
    parser.add_argument("--config", help="perfgate.toml (default: found from here up)")
    parser.add_argument("--scenario", help="default: the config's first default scenario")
    parser.add_argument("--mode", choices=("spec", "plain"), default="spec")
    parser.add_argument("--pairs", type=int, default=5, help="on/off pairs (default 5)")
    parser.add_argument("--repeats", type=int, help="repeats per launch (default: scenario's)")
    parser.add_argument("--budget-s", type=float, help="start no pair after this many seconds")
    parser.add_argument("--workdir", type=Path, help="servers' logs (default: OUT/../work)")
    parser.add_argument(
        "--smoke", action="store_true", help="the shipped tiny models on CPU, short"
    )
    return parser.parse_args(argv)


def pick_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario to launch, shortened for --smoke."""
    config = load_config(args.config)
    (scenario,) = config.select([args.scenario] if args.scenario else [])
    if args.smoke:
        scenario = replace(
            scenario,
            prompts=scenario.prompts[:2],
            max_new_tokens=16,
            repeats=2,
            warmup=1,
        )
    if args.repeats:
        scenario = replace(scenario, repeats=args.repeats)
    return scenario


def measure_pairs(
    scenario: Scenario, mode: str, pairs: int, workdir: Path, budget_s: float | None
) -> list[dict[str, Any]]:
    """Launch the servers; return each pair's median tok/s with and without the probe.

    Pairs go on-off, off-on, on-off...; past the budget no new pair starts (at least
    MIN_PAIRS are measured).
    """
    checked = preflight(scenario)
    started = time.monotonic()
    results = []
    for pair in range(pairs):
        if budget_s is not None and pair >= MIN_PAIRS and time.monotonic() - started > budget_s:
            print(f"over the {budget_s:.0f} s budget after {pair} pairs", file=sys.stderr)
            break
        first = pair % 2 == 0
        row: dict[str, Any] = {"pair": pair + 1, "first": "on" if first else "off"}
        for probe in (first, not first):
            folder = workdir / f"pair-{pair + 1}-{'on' if probe else 'off'}"
            result = measure_mode(scenario, mode, folder, checked=checked, probe=probe)
            row["on" if probe else "off"] = statistics.median(result.samples["output_tok_s"])
            row["device_name"] = result.server_info.get("device_name")
            print(
                f"pair {pair + 1}/{pairs} probe {'on ' if probe else 'off'}: "
                f"{row['on' if probe else 'off']:.1f} tok/s at {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        results.append(row)
    return results


def summarize(scenario: Scenario, mode: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pairs, their ratio estimate and the goal."""
    estimate = paired_ratio([p["on"] for p in pairs], [p["off"] for p in pairs])
    return {
        "scenario": scenario.name,
        "mode": mode,
        "model": scenario.model,
        "draft": scenario.draft,
        "device_name": pairs[0]["device_name"],
        "prompts": len(scenario.prompts),
        "max_new_tokens": scenario.max_new_tokens,
        "repeats": scenario.repeats,
        "pairs": pairs,
        "ratio": estimate.ratio,
        "ratio_low": estimate.low,
        "ratio_high": estimate.high,
        "confidence": estimate.confidence,
        "cost": estimate.cost,
        "goal": GOAL,
        "goal_status": estimate.goal(GOAL),
    }


def render_markdown(summary: dict[str, Any]) -> str:
    """The pairs as a table, then the estimate against the goal."""
    lines = [
        f"# Probe overhead: {summary['scenario']} ({summary['mode']} server) on "
        f"{summary['device_name']}",
        "",
        f"Target `{summary['model']}`, draft `{summary['draft']}`; {summary['prompts']} prompts, "
        f"{summary['max_new_tokens']} new tokens, {summary['repeats']} repeats per launch "
        f"(median); {len(summary['pairs'])} pairs of fresh launches, probe on and off "
        "alternating.",
        "",
        "| pair | first | probe on tok/s | probe off tok/s | on / off |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for p in summary["pairs"]:
        lines.append(
            f"| {p['pair']} | {p['first']} | {p['on']:.1f} | {p['off']:.1f} "
            f"| {p['on'] / p['off']:.4f} |"
        )
    lines += [
        "",
        f"tok/s with the probe over tok/s without: {summary['ratio']:.4f} "
        f"({summary['confidence']:.0%} interval {summary['ratio_low']:.4f} .. "
        f"{summary['ratio_high']:.4f}): the probe costs {summary['cost']:+.2%} of tok/s "
        f"({1 - summary['ratio_high']:+.2%} .. {1 - summary['ratio_low']:+.2%}). "
        f"Goal at most {summary['goal']:.1%}: {summary['goal_status']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pairs < MIN_PAIRS:
        print(f"--pairs must be at least {MIN_PAIRS}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        scenario = pick_scenario(args)
        workdir = args.workdir or args.out.parent / f"{args.out.name}-work"
        pairs = measure_pairs(scenario, args.mode, args.pairs, workdir, args.budget_s)
    except PerfgateError as error:
        print(f"probe_overhead: error: {error}", file=sys.stderr)
        return int(error.exit_code)
    summary = summarize(scenario, args.mode, pairs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe-overhead.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = render_markdown(summary)
    (args.out / "probe-overhead.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
