"""How close the embedded engine's decode step comes to the GPU's memory bandwidth.

    python benchmarks/decode_bandwidth.py --out DIR                # on a CUDA machine
    python benchmarks/decode_bandwidth.py --out DIR --device cpu --model perfgate/llama-tiny

A plain decode step of a small batch reads every weight of the target once; at batch 8 its
arithmetic is far below the GPU's, so its floor is the weights' bytes over the memory's
bandwidth. This measures, on one target with seeded weights (the bytes read do not depend on
the values) and a batch of --batch sequences at --position tokens:

- ``copy``: a device-to-device copy of 2 GiB, bytes read and written over its time: the
  bandwidth this machine's memory gives a plain stream;
- ``matmuls only``: the step's matrix products alone (the stacked projections of every layer,
  and the LM head) on the step's shapes, replayed as one CUDA graph: what cuBLAS reaches on
  these shapes, the floor of any engine that calls it;
- the step itself, replayed as the engine's CUDA graph, for each way the engine can run it:
  ``separate`` (one product per projection, as trained), ``fused`` (``fuse_projections``: what
  every server now runs) and ``fused + compiled`` (``--enable-torch-compile``);
- the same three for a verify forward of --verify-tokens tokens per sequence;
- ``fused + compiled + triton (BLOCK_L, warps, stages)``: the compiled step on
  the triton attention backend (``--attention-backend triton``, what a CUDA server runs by
  default), once per kernel configuration of --attention-configs (the first is the shipped one),
  and once more with the down projections' weights row-major, as trained (``fuse_projections``
  lays them out column-major on a GPU), and once more compiled with the norms reduced in two
  passes over their rows, Inductor's own rule (``compile_layers(..., whole_rows=False)``; by
  default it has them reduced in one);
- with --compile-mode MODE, the compiled step again in that ``torch.compile`` mode (SGLang
  compiles in ``max-autotune-no-cudagraphs``, which times Triton's matrix products against
  cuBLAS's and keeps the faster);
- last, ``norms folded``: the compiled step on the triton backend with each layer's norms
  folded into the products after them (``fold_norms``), what a CUDA server runs; and just
  before it the same with its causal mask built and its argmax taken eagerly, as the engine
  did before they moved into the compiled code (``Transformer.embed``, ``greedy``).

Each time is the median of --blocks blocks of --replays replays, timed with CUDA events. The
table gives each step's time and its weight bytes over that time, in GB/s and as a share of
--peak-gb-s (the H200's 4800 by its datasheet). Writes results.json and results.md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from perfgate.engines.embedded import triton_attention
from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import load_target
from perfgate.engines.embedded.model import (
    Transformer,
    causal_view,
    fold_norms,
    fuse_projections,
    kv_bucket,
    lay_out_down_projections,
    use_attention_backend,
)
from perfgate.engines.embedded.triton_attention import BLOCK_L, NUM_STAGES, NUM_WARPS

VARIANTS = ("separate", "fused", "fused + compiled")


def step_arguments(parser: argparse.ArgumentParser, interpreted_on_cpu: bool = False) -> None:
    """The flags of a benchmark that times the target's decode and verify steps: which model
    where, the batch and its position, and the timer's replays and blocks. With
    interpreted_on_cpu, its Triton kernels run on a CPU under Triton's interpreter only
    (``require_interpreter_on_cpu``)."""
    parser.add_argument("--model", default="perfgate/llama-large")
    device_help = "cpu: under TRITON_INTERPRET=1 only" if interpreted_on_cpu else None
    parser.add_argument("--device", default="cuda", help=device_help)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--position", type=int, default=200, help="tokens already cached")
    parser.add_argument("--verify-tokens", type=int, default=4)
    parser.add_argument("--replays", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument(
        "--warmups", type=int, default=3, help="calls before the timed ones (compiling: 1 at least)"
    )


def require_interpreter_on_cpu(parser: argparse.ArgumentParser, device: str) -> None:
    """Refuse --device cpu (exit 2) unless Triton's interpreter is on to run the kernels."""
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("--device cpu runs under TRITON_INTERPRET=1")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    step_arguments(parser)
    parser.add_argument("--peak-gb-s", type=float, default=4800.0)
    parser.add_argument(
        "--attention-configs",
        default=f"{BLOCK_L}:{NUM_WARPS}:{NUM_STAGES}",
        help="the triton attention kernel's configurations to time on CUDA, "
        "BLOCK_L:warps:stages comma-separated (default: the shipped one)",
    )
    parser.add_argument(
        "--compile-mode",
        action="append",
        default=[],
        metavar="MODE",
        help="also time the compiled step in this torch.compile mode (such as SGLang's "
        "max-autotune-no-cudagraphs); repeatable",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch's CPU threads (default: torch's own choice; a CPU run's timings on a "
        "shared machine hold steadier on one)",
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="on CUDA, also trace 20 replays of each compiled variant's decode step "
        "(torch.profiler) and write the kernels that take its time to kernels.md (the default "
        "mode), kernels-1.md, ... (each --compile-mode)",
    )
    return parser.parse_args(argv)


class Timer:
    """Median time of a callable, in ms per call: CUDA events on a GPU, the clock on a CPU."""

    def __init__(self, device: torch.device, replays: int, blocks: int, warmups: int = 3) -> None:
        self.device, self.replays, self.blocks, self.warmups = device, replays, blocks, warmups

    def __call__(self, fn: Callable[[], object]) -> float:
        return statistics.median(self.blocks_of(fn))

    def blocks_of(self, fn: Callable[[], object]) -> list[float]:
        """The ms per call in each block, after `warmups` calls to warm up."""
        for _ in range(self.warmups):
            fn()
        times = []
        for _ in range(self.blocks):
            if self.device.type == "cuda":
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                for _ in range(self.replays):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / self.replays)
            else:
                began = time.perf_counter()
                for _ in range(self.replays):
                    fn()
                times.append((time.perf_counter() - began) * 1e3 / self.replays)
        return times


def copy_gb_s(device: torch.device, timer: Timer) -> float:
    """Bytes read plus written per second by a 2 GiB device-to-device copy (1/16 on a CPU)."""
    size = 2**30 if device.type == "cuda" else 2**26
    source = torch.randn(size // 2, dtype=torch.bfloat16, device=device)
    dest = torch.empty_like(source)
    ms = Timer(device, 10, timer.blocks, timer.warmups)(lambda: dest.copy_(source))
    return 2 * size / ms / 1e6


def build(model: str, device: torch.device, batch: int) -> Transformer:
    """The target with seeded weights (``--load-format dummy``), caches for `batch` rows."""
    transformer = load_target(model, device, _dtype(device), load_format="dummy")
    transformer.setup_cache(batch)
    return transformer


def _dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def weight_bytes(model: Transformer) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def step_ms(
    model: Transformer,
    args: argparse.Namespace,
    tokens: int,
    timer: Timer,
    kernels: Path | None = None,
    eager_ends: bool = False,
) -> float:
    """Time one forward of `tokens` tokens per sequence and its greedy choice, as a graph,
    as the server runs it; with `kernels`, trace 20 replays and write their kernels' table
    there. With eager_ends, the causal mask is built and the argmax taken outside the
    compiled code, as the engine did before (``Transformer.embed``, ``greedy``)."""
    device = next(model.parameters()).device
    graphs = GraphRunner("cuda" if device.type == "cuda" else "off")
    ids = torch.randint(0, model.config.vocab_size, (args.batch, tokens), device=device)
    positions = args.position + torch.arange(tokens, device=device).expand(args.batch, tokens)
    kv_len = kv_bucket(args.position + tokens, model.max_seq_len)

    def forward(ids: Tensor, positions: Tensor) -> tuple[Tensor, ...]:
        if eager_ends:
            logits, _ = model(ids, positions, causal_view(positions, kv_len))
            return (logits.argmax(-1),)
        logits, _ = model(ids, positions, kv_len)
        return (model.greedy(logits),)

    def replay() -> object:
        return graphs.run(("step", tokens), forward, ids, positions)

    with torch.inference_mode():
        ms = timer(replay)
        if kernels is not None:
            kernels.write_text(kernel_table(replay))
    return ms


def kernel_table(fn: Callable[[], object], calls: int = 20) -> str:
    """The kernels of `calls` calls of fn by device time: microseconds and count per call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as traced:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = sorted(
        (
            (event.self_device_time_total / calls, event.count / calls, event.key)
            for event in traced.key_averages()
            if event.self_device_time_total > 0
        ),
        reverse=True,
    )
    total = sum(us for us, _, _ in rows)
    lines = [
        f"Kernels of one call, {calls} calls traced: {total:.1f} us of device time in "
        f"{sum(n for _, n, _ in rows):.0f} kernels.",
        "",
        "| us per call | share | kernels per call | kernel |",
        "| ---: | ---: | ---: | --- |",
    ]
    for us, count, name in rows[:40]:
        lines.append(f"| {us:.1f} | {us / total:.1%} | {count:g} | `{name[:110]}` |")
    return "\n".join(lines) + "\n"


def matmuls_ms(model: Transformer, args: argparse.Namespace, timer: Timer) -> float:
    """Time the step's matrix products alone (stacked projections), replayed as one graph."""
    device = next(model.parameters()).device
    dtype = _dtype(device)
    config = model.config
    # Once stacked, the linear layers are each layer's qkv, out, gate+up and down, and the head.
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    inputs = {
        w.shape[1]: torch.randn(args.batch, w.shape[1], device=device, dtype=dtype) for w in weights
    }

    def products(x: Tensor) -> tuple[Tensor, ...]:
        out = x
        for weight in weights:
            out = inputs[weight.shape[1]] @ weight.t()
        return (out,)

    graphs = GraphRunner("cuda" if device.type == "cuda" else "off")
    seed = torch.randn(args.batch, config.dim, device=device, dtype=dtype)
    with torch.inference_mode():
        return timer(lambda: graphs.run("matmuls", products, seed))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    timer = Timer(device, args.replays, args.blocks, args.warmups)
    results: dict[str, Any] = {
        "model": args.model,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "batch": args.batch,
        "position": args.position,
        "verify_tokens": args.verify_tokens,
        "peak_gb_s": args.peak_gb_s,
        "copy_gb_s": copy_gb_s(device, timer),
        "steps": {},
    }
    model = build(args.model, device, args.batch)
    results["weight_bytes"] = weight_bytes(model)
    for variant in VARIANTS:
        if variant == "fused":
            fuse_projections(model)
            results["matmuls_only_ms"] = matmuls_ms(model, args, timer)
        elif variant == "fused + compiled":
            compile_layers(model)
        _time_variant(results, variant, model, args, timer)
    if device.type == "cuda" and triton_attention.available():
        use_attention_backend(model, "triton")
        for config in args.attention_configs.split(","):
            block_l, warps, stages = (int(part) for part in config.split(":"))
            triton_attention.BLOCK_L, triton_attention.NUM_WARPS = block_l, warps
            triton_attention.NUM_STAGES = stages
            label = f"fused + compiled + triton ({block_l}, {warps}, {stages})"
            _time_variant(results, label, model, args, timer)
        triton_attention.BLOCK_L, triton_attention.NUM_WARPS = BLOCK_L, NUM_WARPS
        triton_attention.NUM_STAGES = NUM_STAGES
        # The down projections as trained, row-major (fuse_projections lays them out
        # column-major on a GPU): what that layout is worth to the step.
        lay_out_down_projections(model, column_major=False)
        _time_variant(results, "fused + compiled + triton, down row-major", model, args, timer)
        lay_out_down_projections(model, column_major=True)
        # The norms reduced in two passes over their rows, Inductor's own rule for rows wider
        # than 1024 (compile_layers has each reduced in one): compiled again that way.
        torch._dynamo.reset()
        compile_layers(model, whole_rows=False)
        _time_variant(results, "fused + compiled + triton, norms in two passes", model, args, timer)
        torch._dynamo.reset()
        compile_layers(model)
        use_attention_backend(model, "torch_native")
    for mode in args.compile_mode:
        torch._dynamo.reset()  # the layers' code was compiled in the default mode above
        compile_layers(model, mode)
        _time_variant(results, f"fused + compiled ({mode})", model, args, timer)
    if device.type == "cuda" and triton_attention.available():
        # What a CUDA server runs: the norms folded into the products after them (for good:
        # last), the triton backend, compiled in the default mode.
        fold_norms(model)
        use_attention_backend(model, "triton")
        torch._dynamo.reset()
        compile_layers(model)
        label = "fused + compiled + triton, norms folded"
        _time_variant(results, f"{label}, mask and argmax eager", model, args, timer, True)
        _time_variant(results, label, model, args, timer)
    return results


def _time_variant(
    results: dict[str, Any],
    variant: str,
    model: Transformer,
    args: argparse.Namespace,
    timer: Timer,
    eager_ends: bool = False,
) -> None:
    """Time variant's decode and verify steps into results (``step_ms``); with --kernels on
    CUDA, trace a compiled variant's decode step into kernels.md (the default mode) or
    kernels-N.md."""
    began = time.perf_counter()
    kernels = None
    if args.kernels and args.device.startswith("cuda") and "compiled" in variant:
        extra = sum("compiled" in name for name in results["steps"])
        kernels = args.out / (f"kernels-{extra}.md" if extra else "kernels.md")
    decode = step_ms(model, args, 1, timer, kernels, eager_ends)
    verify = step_ms(model, args, args.verify_tokens, timer, eager_ends=eager_ends)
    results["steps"][variant] = {
        "decode_ms": decode,
        "verify_ms": verify,
        "seconds_to_build_and_time": round(time.perf_counter() - began, 1),
    }
    print(f"{variant}: decode {decode:.3f} ms, verify {verify:.3f} ms", file=sys.stderr)


def render(results: dict[str, Any]) -> str:
    gb = results["weight_bytes"] / 1e9
    peak = results["peak_gb_s"]

    def row(label: str, ms: float) -> str:
        rate = results["weight_bytes"] / ms / 1e6
        return f"| {label} | {ms:.3f} | {rate:.0f} | {rate / peak:.0%} |"

    lines = [
        f"# Decode bandwidth: {results['model']} on {results['device_name']}",
        "",
        f"torch {results['torch_version']}; batch {results['batch']} at position "
        f"{results['position']}; the target's weights: {gb:.2f} GB; device-to-device copy: "
        f"{results['copy_gb_s']:.0f} GB/s (read + written); peak taken as {peak:.0f} GB/s.",
        "",
        "| forward | ms | weight GB/s | of peak |",
        "| --- | ---: | ---: | ---: |",
        row("matmuls only (fused shapes)", results["matmuls_only_ms"]),
    ]
    for variant, timing in results["steps"].items():
        lines.append(row(f"decode, {variant}", timing["decode_ms"]))
    for variant, timing in results["steps"].items():
        lines.append(row(f"verify x{results['verify_tokens']}, {variant}", timing["verify_ms"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out, measure(args), render)
    return 0


def write_results(
    out: Path, results: dict[str, Any], render: Callable[[dict[str, Any]], str]
) -> None:
    """Write results.json and results.md (render's table) to out, and print the table."""
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = render(results)
    (out / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
