"""The folded step's time by its kernels' configuration (folded_norms.BLOCK_F, NUM_WARPS).

python benchmarks/folded_configs.py --out DIR       # on a CUDA machine, ~1 minute

The step is compiled (``compile_layers``), as a CUDA server runs it; --eager leaves the layers
uncompiled, the folded kernels called the same way: the script's path on a CPU under Triton's
interpreter, where compiling costs more than the rest of the run and times nothing the GPU
record needs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from decode_bandwidth import (
    Timer,
    build,
    require_interpreter_on_cpu,
    step_arguments,
    step_ms,
    write_results,
)

from perfgate.engines.embedded import folded_norms
from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.model import fold_norms, fuse_projections, use_attention_backend

CONFIGS = [(512, 4), (256, 4), (1024, 4), (2048, 4), (512, 2), (512, 8), (1024, 8)]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    model = build(args.model, device, args.batch)
    fuse_projections(model)
    fold_norms(model)
    use_attention_backend(model, "triton")
    if not args.eager:
        compile_layers(model)
    timer = Timer(device, args.replays, args.blocks, args.warmups)
    results: dict[str, Any] = {
        "model": args.model,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
    }
    if args.eager:  # a compiled run's record is as it was before --eager
        results["compiled"] = False
    results["ms"] = {}
    for block_f, warps in CONFIGS:
        folded_norms.BLOCK_F, folded_norms.NUM_WARPS = block_f, warps
        decode = step_ms(model, args, 1, timer)
        verify = step_ms(model, args, args.verify_tokens, timer)
        results["ms"][f"BLOCK_F {block_f}, warps {warps}"] = [decode, verify]
        print(f"{block_f} {warps}: decode {decode:.4f} verify {verify:.4f}", file=sys.stderr)
    return results


def render(results: dict[str, Any]) -> str:
    lines = [
        f"# The folded step by its kernels' configuration: {results['model']} on "
        f"{results['device_name']}",
        "",
        f"torch {results['torch_version']}"
        + (
            "; eager (--eager), the layers not compiled."
            if results.get("compiled") is False
            else "."
        ),
        "",
        "| kernels' configuration | decode ms | verify ms |",
        "| --- | ---: | ---: |",
    ]
    for label, (decode, verify) in results["ms"].items():
        lines.append(f"| {label} | {decode:.4f} | {verify:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    step_arguments(parser, interpreted_on_cpu=True)
    parser.add_argument(
        "--eager",
        action="store_true",
        help="leave the layers uncompiled (the folded kernels called the same way): the "
        "script's path on a CPU, where compiling costs more than the rest of the run",
    )
    args = parser.parse_args()
    require_interpreter_on_cpu(parser, args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out, measure(args), render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
