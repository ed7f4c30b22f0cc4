"""Plain vs EAGLE-3 decoding on the embedded engine: tok/s, phase shares, a steps sweep.

    python benchmarks/gpu_engine.py --out results/h200            # the GPU experiment
    python benchmarks/gpu_engine.py --out results/cpu --device cpu  # the shipped tiny models
    python benchmarks/gpu_engine.py --out /tmp/smoke --smoke        # tiny random models, CPU

Every configuration is measured the way a gate run measures a scenario: its server is launched
with the probe (``perfgate.measure.measure_mode``), warmed up, and timed over the prompt set;
the probe gives each phase's time per cycle (CUDA events on a GPU).

On CUDA the default models are ``perfgate/llama-large`` (24 layers, d=2048, ~1.1B parameters,
bf16) and its EAGLE-3 head, with the weights ``perfgate embedded train --size large --device
cuda`` trained into this machine's model cache. ``--accept-rate -1`` measures their real
acceptance; the default still simulates it (``--debug-simulate-accept-rate``, 0.7 per draft
token: a chain of 3 drafts accepts 2.53 tokens per cycle on average, about what Llama-3.1-8B's
EAGLE-3 head reaches on MT-Bench), which compares with the records of seeded weights. On CPU
the default models are the shipped trained tiny ones, with their real acceptance.
``--compile`` runs both servers with ``--enable-torch-compile``.

Writes ``results.json`` and ``results.md`` to --out. Needs torch, httpx and safetensors, and
perfgate importable (``PYTHONPATH=.`` from a checkout).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from portable_paths import default_names, portable

from perfgate.config import Scenario
from perfgate.engines.server_commands import Mode
from perfgate.errors import PerfgateError
from perfgate.measure import measure_mode
from perfgate.prompts import load_prompt_set
from perfgate.results import ModeResult

PHASES = ("draft", "verify", "accept", "draft_extend")
MAIN_STEPS = 3
SMOKE_TARGET = {
    "architecture": "llama",
    "vocab_size": 256,
    "n_layer": 2,
    "dim": 64,
    "n_head": 2,
    "ffn_dim": 128,
    "max_seq_len": 512,
    "seed": 0,
}
SMOKE_DRAFT = {
    "architecture": "eagle3",
    "dim": 64,
    "n_head": 2,
    "ffn_dim": 128,
    "feature_layers": [1, 1, 2],
    "max_seq_len": 512,
    "seed": 1,
}


@dataclass(frozen=True)
class Plan:
    """What to measure, and how long it may take."""

    device: str
    model: str
    draft: str
    dtype: str
    steps: tuple[int, ...]
    topk: int
    draft_tokens: int | None  # None: a chain's steps + 1
    accept_rate: float | None  # None: the draft's real acceptance
    max_new_tokens: int
    repeats: int
    budget_s: float
    extra_args: tuple[str, ...] = ()
    prompts: tuple[str, ...] = field(default_factory=lambda: load_prompt_set("default"))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the results")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--smoke", action="store_true", help="tiny random models on CPU")
    parser.add_argument("--model", help="target (default: by device)")
    parser.add_argument("--draft", help="EAGLE-3 head (default: by device)")
    parser.add_argument("--steps", default="1-8", help="sweep, e.g. 1-8 or 1,2,3 (default 1-8)")
    parser.add_argument("--topk", type=int, default=1, help="draft branches (default 1: chains)")
    parser.add_argument(
        "--draft-tokens", type=int, default=None, help="tokens per verify of a tree (topk > 1)"
    )
    parser.add_argument(
        "--accept-rate",
        type=float,
        default=None,
        help="simulate this per-draft acceptance (default: 0.7 on CUDA, real on CPU); "
        "pass -1 for the draft's real acceptance",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run both servers with --enable-torch-compile (the decoder layers compiled)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=450.0, help="stop sweeping after this")
    return parser.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    """Resolve the defaults of the device the run is on."""
    device = args.device
    if args.smoke:
        device = "cpu"
    elif device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    steps = parse_steps(args.steps if not args.smoke else "1-2")
    rate = args.accept_rate if args.accept_rate is not None else (0.7 if gpu or args.smoke else -1)
    plan = Plan(
        device=device,
        model=args.model or ("perfgate/llama-large" if gpu else "perfgate/llama-tiny"),
        draft=args.draft
        or ("perfgate/eagle3-llama-large" if gpu else "perfgate/eagle3-llama-tiny"),
        dtype="bfloat16" if gpu else "float32",
        steps=steps,
        topk=args.topk,
        draft_tokens=args.draft_tokens,
        accept_rate=None if rate < 0 else rate,
        max_new_tokens=args.max_new_tokens or (8 if args.smoke else 256 if gpu else 64),
        repeats=1 if args.smoke else args.repeats,
        budget_s=args.budget_s,
        extra_args=(() if gpu else ("--num-threads", "1"))
        + (("--enable-torch-compile",) if args.compile else ()),
    )
    if args.smoke:
        models = smoke_models(args.out / "models")
        plan = replace(plan, prompts=plan.prompts[:2], model=models["model"], draft=models["draft"])
    return plan


def parse_steps(text: str) -> tuple[int, ...]:
    """Parse "1-8" or "1,2,3" into step counts."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-", 1))
        return tuple(range(first, last + 1))
    return tuple(int(part) for part in text.split(","))


def smoke_models(directory: Path) -> dict[str, str]:
    """Write tiny random model configs (seeded, no weights); return their paths."""
    paths = {}
    for key, config in (("model", SMOKE_TARGET), ("draft", SMOKE_DRAFT)):
        path = directory / key
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config))
        paths[key] = str(path)
    return paths


def scenario(plan: Plan, steps: int) -> Scenario:
    """Return the scenario of one configuration: `steps` draft levels (a chain by default)."""
    spec_args: tuple[str, ...] = ()
    if plan.accept_rate is not None:
        spec_args = ("--debug-simulate-accept-rate", str(plan.accept_rate))
    return Scenario(
        name=f"steps-{steps}",
        engine="embedded",
        model=plan.model,
        draft=plan.draft,
        steps=steps,
        topk=plan.topk,
        draft_tokens=plan.draft_tokens if plan.topk > 1 and plan.draft_tokens else steps + 1,
        dtype=plan.dtype,
        device=plan.device,
        max_running_requests=len(plan.prompts),
        prompts=plan.prompts,
        max_new_tokens=plan.max_new_tokens,
        repeats=plan.repeats,
        warmup=1,
        extra_args=plan.extra_args,
        spec_extra_args=spec_args,
        equivalence="report" if plan.accept_rate is not None else "gate",
        startup_timeout_s=300.0,
    )


def measure(plan: Plan, steps: int, mode: Mode, workdir: Path) -> ModeResult:
    """Measure one server; on a failure with CUDA graphs, once more without them."""
    chosen = scenario(plan, steps)
    try:
        return measure_mode(chosen, mode, workdir / f"{mode}-{steps}")
    except PerfgateError:
        if plan.device != "cuda":
            raise
        print(f"{mode} steps={steps} failed; again with --disable-cuda-graph", file=sys.stderr)
        traceback.print_exc()
        eager = replace(chosen, extra_args=(*chosen.extra_args, "--disable-cuda-graph"))
        return measure_mode(eager, mode, workdir / f"{mode}-{steps}-eager")


def summarize(result: ModeResult) -> dict[str, Any]:
    """Return the medians over repeats and each phase's total share of the cycle time."""
    samples = {key: statistics.median(values) for key, values in result.samples.items()}
    totals: dict[str, float] = {}
    for summary in result.phases:
        totals[summary.phase] = totals.get(summary.phase, 0.0) + summary.mean_ms * summary.cycles
    cycle_total = totals.get("cycle", 0.0)
    shares = {p: totals[p] / cycle_total for p in PHASES if p in totals and cycle_total}
    if shares:
        shares["other"] = 1.0 - sum(shares.values())
    return {
        "samples": samples,
        "phase_shares": shares,
        "cycles": sum(s.cycles for s in result.phases if s.phase == "cycle"),
        "command": result.command,
        "eager": "--disable-cuda-graph" in result.command,
        "device_name": result.server_info.get("device_name"),
        "torch_version": result.server_info.get("torch_version"),
    }


def weight_bytes(model: str, dtype: str) -> int:
    """Return the bytes of the target's weights: what one decode step reads at least."""
    import torch

    from perfgate.engines.embedded.loading import resolve_model, target_config
    from perfgate.engines.embedded.model import Transformer

    with torch.device("meta"):
        transformer = Transformer(target_config(resolve_model(model)))
    itemsize = 2 if dtype in ("bfloat16", "float16") else 4
    return sum(p.numel() for p in transformer.parameters()) * itemsize


def run_plan(plan: Plan, out: Path) -> dict[str, Any]:
    """Measure plain, then speculative at MAIN_STEPS, then the rest of the sweep."""
    started = time.monotonic()
    results: dict[str, Any] = {"plan": {k: v for k, v in vars(plan).items()}, "sweep": {}}
    workdir = out / "work"
    results["plain"] = summarize(measure(plan, MAIN_STEPS, "plain", workdir))
    results["target_weight_bytes"] = weight_bytes(plan.model, plan.dtype)
    step_ms = results["plain"]["samples"].get("cycle_ms")
    if step_ms:  # weights read per decode step over its time: near the memory's peak if bound
        results["plain_weight_read_gb_s"] = results["target_weight_bytes"] / step_ms / 1e6
    order = sorted(plan.steps, key=lambda s: (s != MAIN_STEPS, s))
    for steps in order:
        if time.monotonic() - started > plan.budget_s:
            results["sweep"][str(steps)] = {"skipped": f"over the {plan.budget_s:.0f} s budget"}
            continue
        results["sweep"][str(steps)] = summarize(measure(plan, steps, "spec", workdir))
        print(f"steps={steps} done at {time.monotonic() - started:.0f} s", file=sys.stderr)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results


def render_markdown(results: dict[str, Any]) -> str:
    """Return the results as markdown tables."""
    plan, plain = results["plan"], results["plain"]
    plain_tok_s = plain["samples"]["output_tok_s"]
    rate = plan["accept_rate"]
    lines = [
        f"# Embedded engine: plain vs EAGLE-3 on {plain['device_name']}",
        "",
        f"Target `{plan['model']}`, draft `{plan['draft']}`, {plan['dtype']}, "
        f"{len(plan['prompts'])} prompts as one batch, {plan['max_new_tokens']} new tokens, "
        f"{plan['repeats']} repeats (medians); "
        + (
            f"topk {plan['topk']}, {plan['draft_tokens']} draft tokens; "
            if plan["topk"] > 1
            else ""
        )
        + "acceptance: "
        + ("the draft's own" if rate is None else f"simulated, {rate} per draft token")
        + f"; torch {plain['torch_version']}; {results['elapsed_s']} s in all.",
        "",
        f"Plain: {plain_tok_s:.1f} tok/s, decode step "
        f"{plain['samples'].get('cycle_ms', float('nan')):.3f} ms (median); the target's "
        f"{results['target_weight_bytes'] / 1e9:.2f} GB of weights read per step make "
        f"{results.get('plain_weight_read_gb_s', float('nan')):.0f} GB/s.",
        "",
        "| steps | tok/s | speedup | accept length | verify ms | draft ms | draft_extend ms "
        "| cycle ms | verify share | draft share |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for steps, row in sorted(results["sweep"].items(), key=lambda item: int(item[0])):
        if "skipped" in row:
            lines.append(f"| {steps} | {row['skipped']} |||||||||")
            continue
        s, shares = row["samples"], row["phase_shares"]
        lines.append(
            f"| {steps} | {s['output_tok_s']:.1f} | {s['output_tok_s'] / plain_tok_s:.2f}x "
            f"| {s.get('accept_length', float('nan')):.2f} | {s.get('verify_ms', 0):.3f} "
            f"| {s.get('draft_ms', 0):.3f} | {s.get('draft_extend_ms', 0):.3f} "
            f"| {s.get('cycle_ms', 0):.3f} | {shares.get('verify', 0):.0%} "
            f"| {shares.get('draft', 0):.0%} |"
        )
    main = results["sweep"].get(str(MAIN_STEPS), {})
    if "phase_shares" in main:
        lines += ["", f"Share of the cycle by phase at steps={MAIN_STEPS} (time totals):", ""]
        lines += ["| phase | share |", "| --- | --- |"]
        lines += [f"| {phase} | {share:.1%} |" for phase, share in main["phase_shares"].items()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(args)
    results = run_plan(plan, args.out)
    # The servers' commands are quoted with this machine's paths: a record names them portably.
    out = args.out.resolve()
    names = {**default_names(), str(out): "OUT", str(out / "work"): "WORK"}
    results = json.loads(portable(json.dumps(results), names))
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    markdown = render_markdown(results)
    (args.out / "results.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
