"""What the probe costs: tok/s with the probe over tok/s without it, in one session.

    python benchmarks/probe_overhead.py --scenario embedded-large-gpu --out results/probe
    python benchmarks/probe_overhead.py --smoke --out /tmp/probe   # tiny models, CPU, seconds

The probe goes on and off in pairs of blocks whose order alternates too (on-off, off-on,
on-off, ...: drift over the session cancels within a pair and between pairs). Each pair gives
one ratio of median tok/s; their geometric mean and its 95% interval (Student's t over the
pairs' log ratios) say what the probe costs, against the design's goal of at most 0.5%.

Two ways to switch it (``--how``):

- ``process`` (the default for the embedded engine): one engine, loaded once in this process
  as its server loads it, the probe's wrappers put on its worker's methods and taken off
  between blocks; a block is the scenario's repeats of its prompts. Launch-to-launch
  variation (on an H200, +-3% of tok/s between fresh launches of the same server) stays out,
  so a cost of a few tenths of a percent can be seen at all. Simulated acceptance
  (``--debug-simulate-accept-rate``) draws the same numbers in every repeat, so every block
  decodes the same tokens in the same cycles.
- ``launches`` (any engine, SGLang's too): fresh server launches, each measured as a gate run
  measures a server (``perfgate.measure``); the probe-off launches run with
  ``PERFGATE_PROBE_DIR`` empty, so nothing of the probe loads in them.

``PERFGATE_PROBE_EVERY`` in the environment sets the probe's stride in both.

Writes ``probe-overhead.json`` and ``probe-overhead.md`` to --out. Needs perfgate importable
(``PYTHONPATH=.`` from a checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.config import Scenario, load_config
from perfgate.engines.server_commands import Mode, server_command
from perfgate.errors import ConfigError, ExitCode, InfrastructureError, PerfgateError
from perfgate.measure import measure_mode
from perfgate.preflight import preflight
from perfgate.profile.overhead import paired_ratio

SERVER_MODULE = "perfgate.engines.embedded.server"
GOAL = 0.005  # the probe may take at most 0.5% of tok/s
MIN_PAIRS = 2  # a budget may cut the pairs short, never below this


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the two files")
    parser.add_argument("--config", help="perfgate.toml (default: found from here up)")
    parser.add_argument("--scenario", help="default: the config's first default scenario")
    parser.add_argument("--mode", choices=("spec", "plain"), default="spec")
    parser.add_argument("--pairs", type=int, default=5, help="on/off pairs (default 5)")
    parser.add_argument(
        "--how",
        choices=("process", "launches"),
        help="switch the probe in one engine process or between launches "
        "(default: process for the embedded engine, launches otherwise)",
    )
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


def alternate(
    measure_block: Callable[[int, bool], float], pairs: int, budget_s: float | None
) -> list[dict[str, Any]]:
    """Each pair's tok/s with and without the probe, from `measure_block(pair, probe_on)`.

    Pairs go on-off, off-on, on-off...; past the budget no new pair starts (at least
    MIN_PAIRS are measured).
    """
    started = time.monotonic()
    results = []
    for pair in range(pairs):
        if budget_s is not None and pair >= MIN_PAIRS and time.monotonic() - started > budget_s:
            print(f"over the {budget_s:.0f} s budget after {pair} pairs", file=sys.stderr)
            break
        first = pair % 2 == 0
        row: dict[str, Any] = {"pair": pair + 1, "first": "on" if first else "off"}
        for probe in (first, not first):
            side = "on" if probe else "off"
            row[side] = measure_block(pair + 1, probe)
            print(
                f"pair {pair + 1}/{pairs} probe {side:3}: {row[side]:.1f} tok/s "
                f"at {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        results.append(row)
    return results


def measure_pairs(
    scenario: Scenario, mode: Mode, pairs: int, workdir: Path, budget_s: float | None
) -> list[dict[str, Any]]:
    """Fresh server launches, the probe on in every other one."""
    checked = preflight(scenario)
    device: dict[str, Any] = {}

    def launch(pair: int, probe: bool) -> float:
        folder = workdir / f"pair-{pair}-{'on' if probe else 'off'}"
        result = measure_mode(scenario, mode, folder, checked=checked, probe=probe)
        # The embedded engine names its device; SGLang's /server_info does not, so the GPUs
        # the preflight found name it (the H200 run printed "on None").
        found = ", ".join(sorted({gpu.name for gpu in checked.gpus})) or "cpu"
        device["name"] = result.server_info.get("device_name") or found
        return statistics.median(result.samples["output_tok_s"])

    results = alternate(launch, pairs, budget_s)
    for row in results:
        row["device_name"] = device["name"]
    return results


def measure_in_process(
    scenario: Scenario, mode: Mode, pairs: int, workdir: Path, budget_s: float | None
) -> list[dict[str, Any]]:
    """One embedded engine in this process; the probe's wrappers on and off between blocks."""
    from perfgate.engines.embedded import worker as worker_module
    from perfgate.engines.embedded.api import GenerateRequest, encode_text
    from perfgate.engines.embedded.args import check_args
    from perfgate.engines.embedded.args import parse_args as parse_server_args
    from perfgate.engines.embedded.engine import build_app
    from perfgate.probe import runtime
    from perfgate.probe.reader import read_records
    from perfgate.probe.targets import EMBEDDED_TARGETS
    from perfgate.spec.probe import EVERY_VARIABLE, parse_every

    argv = server_command(scenario, mode, port=1).argv  # the port is never opened
    args = parse_server_args(list(argv[argv.index(SERVER_MODULE) + 1 :]))
    app = build_app(args, check_args(args))
    device_name = app.server_info()["device_name"]
    prompts = [encode_text(p) for p in scenario.prompts]
    request = GenerateRequest(
        prompts, [scenario.max_new_tokens] * len(prompts), [str(i) for i in range(len(prompts))],
        is_batch=True,
    )  # fmt: skip
    probe_dir = workdir / "probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    runtime._out_dir = probe_dir  # as activate() does in a server
    runtime._every = parse_every(os.environ.get(EVERY_VARIABLE))

    def switch(on: bool) -> None:
        (runtime.patch_class if on else runtime.unpatch_class)(worker_module, EMBEDDED_TARGETS)

    simulated = getattr(app.engine.worker, "simulate", None)

    def block() -> float:
        rates: list[float] = []
        for _ in range(scenario.repeats):
            app.engine.flush()
            if simulated is not None:  # the same simulated acceptance in every repeat
                simulated.generator.manual_seed(args.random_seed)
            started = time.perf_counter()
            responses = app.engine.generate(request, started)
            elapsed = time.perf_counter() - started
            tokens = sum(r["meta_info"]["completion_tokens"] for r in responses)
            rates.append(tokens / elapsed)
        return statistics.median(rates)

    def switched_block(pair: int, probe: bool) -> float:
        switch(probe)
        return block()

    for _ in range(scenario.warmup):
        block()
    results = alternate(switched_block, pairs, budget_s)
    for row in results:
        row["device_name"] = device_name
    switch(False)
    if runtime._probe is not None:
        runtime._probe.close()
    cycles = [r for r in read_records(probe_dir) if r.kind == "cycle"]
    if not cycles:
        raise InfrastructureError(
            f"the probe timed no cycle (nothing in {probe_dir}); with {EVERY_VARIABLE} set, "
            "is its stride above the number of cycles the blocks ran?"
        )
    for row in results:
        row["cycles_timed"] = len(cycles)  # over the whole session
        row["every"] = cycles[0].every
    return results


def summarize(
    scenario: Scenario, mode: str, pairs: list[dict[str, Any]], how: str
) -> dict[str, Any]:
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
        "how": how,
        "every": pairs[0].get("every"),
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
        f"{summary['max_new_tokens']} new tokens, {summary['repeats']} repeats per "
        f"{'block' if summary['how'] == 'process' else 'launch'} (median); "
        f"{len(summary['pairs'])} pairs, probe on and off alternating, "
        + (
            "in one engine process (the probe's wrappers put on and taken off); the probe "
            f"timed one decode cycle in {summary['every']}."
            if summary["how"] == "process"
            else "fresh server launches."
        ),
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
        how = args.how or ("process" if scenario.engine == "embedded" else "launches")
        if how == "process" and scenario.engine != "embedded":
            raise ConfigError(
                f"--how process needs the embedded engine, not {scenario.engine!r}",
                fix="use --how launches",
            )
        measure = measure_in_process if how == "process" else measure_pairs
        mode: Mode = "plain" if args.mode == "plain" else "spec"
        pairs = measure(scenario, mode, args.pairs, workdir, args.budget_s)
    except PerfgateError as error:
        print(f"probe_overhead: error: {error}", file=sys.stderr)
        return int(error.exit_code)
    summary = summarize(scenario, args.mode, pairs, how)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe-overhead.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = render_markdown(summary)
    (args.out / "probe-overhead.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
