"""The decode step's matrix products at 8 rows: cuBLAS against a split-K Triton kernel.

    python benchmarks/skinny_gemm.py --out DIR                  # on a CUDA machine, ~2 minutes
    TRITON_INTERPRET=1 python benchmarks/skinny_gemm.py --check # the kernel's numbers, on a CPU

A plain decode step of the large configuration at batch 8 spends about two thirds of its time
in four matrix products per layer, ``x [8, K] @ W.T`` with ``W [N, K]``: the stacked query, key
and value projection (N 6144, K 2048), the attention's output (2048, 2048), the stacked gate and
up projection (11264, 2048) and the down projection (2048, 5632). Each reads its weight once, so
its floor is the weight's bytes over the memory's bandwidth. This times, per shape, 24 products
with 24 distinct weights (as 24 layers: no weight stays in the L2 cache between two uses)
captured as one CUDA graph and replayed:

- ``cublas``: ``torch.mm``, what the engine runs;
- ``cublaslt``: the same with ``torch.backends.cuda.preferred_blas_library("cublaslt")``;
- ``cublas swapped``: ``(W @ x.T).T``, the product with its operands swapped (as a view, and
  made contiguous), and ``cublas, weights [K, N]``: ``x @ W.T`` with W.T stored contiguous;
  cuBLAS's heuristics pick their kernels by the layouts and shapes they see;
- ``triton`` configurations of ``skinny_mm`` below: each program multiplies the 8 rows (padded
  to 16, the smallest tile ``tl.dot`` takes) by BLOCK_N rows of the weight over a 1/SPLIT_K
  share of K; with SPLIT_K > 1 the shares are added atomically into a float32 output that is
  zeroed before and cast after, both inside the graph and inside the time.

Writes results.json and results.md (per shape: each way's microseconds a product, GB/s and share
of --peak-gb-s; the best Triton configuration; the four shapes' sum as a layer's products).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from decode_bandwidth import Timer, write_results

from perfgate.engines.embedded.graphs import GraphRunner

SHAPES = {  # name: (N, K) of perfgate/llama-large's stacked projections
    "qkv": (6144, 2048),
    "out": (2048, 2048),
    "gate_up": (11264, 2048),
    "down": (2048, 5632),
}
GRIDS = {  # --configs: (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)
    "small": list(itertools.product((16, 32, 64), (128, 256), (1, 2, 4), (4,), (4,))),
    "wide": list(itertools.product((32, 64), (128, 256), (1, 2), (4, 8), (3, 5, 6))),
    "none": [],
}


@triton.jit
def skinny_mm(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """y[M, N] (+)= x[M, K] @ w[N, K].T over the program's share of K; K % (SPLIT_K * BLOCK_K)
    must be 0. With SPLIT_K > 1, y is float32 and zeroed by the caller."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    span = K // SPLIT_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, span, BLOCK_K):
        offs_k = pid_k * span + start + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=offs_m[:, None] < M,
            other=0.0,
        )
        w = tl.load(
            w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
            mask=offs_n[:, None] < N,
            other=0.0,
        )
        acc += tl.dot(x, tl.trans(w))
    out = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=inside)
    else:
        tl.atomic_add(out, acc, mask=inside)


def triton_mm(x: torch.Tensor, w: torch.Tensor, config: tuple[int, ...]) -> torch.Tensor:
    """x [M, K] @ w [N, K].T by skinny_mm in `config`; M <= 16."""
    block_n, block_k, split_k, warps, stages = config
    (m, k), n = x.shape, w.shape[0]
    assert m <= 16 and k % (split_k * block_k) == 0
    y = torch.zeros(m, n, device=x.device, dtype=torch.float32 if split_k > 1 else x.dtype)
    grid = (triton.cdiv(n, block_n), split_k)
    skinny_mm[grid](
        x, w, y, m, n, k, x.stride(0), w.stride(0), y.stride(0),
        BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split_k,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return y.to(x.dtype) if split_k > 1 else y


def fits(shape: tuple[int, int], config: tuple[int, ...]) -> bool:
    return shape[1] % (config[2] * config[1]) == 0


def check(device: str, configs: Sequence[tuple[int, ...]]) -> int:
    """Compare every configuration with torch.mm on small operands of each shape's K."""
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    worst = 0.0
    for (n, k), config in itertools.product(((96, 256), (40, 512)), configs):
        if not fits((n, k), config):
            continue
        x = torch.randn(8, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype) / k**0.5
        expected = (x.float() @ w.float().t()).to(dtype)
        got = triton_mm(x, w, config)
        err = (got.float() - expected.float()).abs().max().item()
        worst = max(worst, err)
        print(f"N {n} K {k} config {config}: max error {err:.2e}", file=sys.stderr)
    print(f"worst error {worst:.2e}")
    return 0 if worst < 0.05 else 1


def products(
    x: torch.Tensor,
    weights: list[torch.Tensor],
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> float:
    """Microseconds a product of x by each of the weights, replayed as one graph on a GPU
    (the engine's GraphRunner), the median of 5 blocks of 50 calls."""
    graphs = GraphRunner("cuda" if x.is_cuda else "off")
    timer = Timer(x.device, replays=50, blocks=5)
    ms = timer(lambda: graphs.run("products", lambda: tuple(mm(x, w) for w in weights)))
    return ms * 1e3 / len(weights)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    results: dict[str, Any] = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "triton_version": triton.__version__,
        "rows": args.rows,
        "layers": args.layers,
        "peak_gb_s": args.peak_gb_s,
        "shapes": {},
    }
    for name, (n, k) in SHAPES.items():
        weights = [torch.randn(n, k, device=device, dtype=dtype) for _ in range(args.layers)]
        x = torch.randn(args.rows, k, device=device, dtype=dtype)
        ways: dict[str, float] = {}

        ways["cublas"] = products(x, weights, lambda a, b: a @ b.t())
        if device.type == "cuda":
            torch.backends.cuda.preferred_blas_library("cublaslt")
            ways["cublaslt"] = products(x, weights, lambda a, b: a @ b.t())
            torch.backends.cuda.preferred_blas_library("cublas")
        # The same product with cuBLAS's operands swapped, y.T = W @ x.T: its heuristics
        # see N rows and 8 columns, and may pick other kernels; as a view, and made
        # contiguous; then the weights stored transposed, [K, N].
        ways["cublas swapped"] = products(x, weights, lambda a, b: (b @ a.t()).t())
        ways["cublas swapped, contiguous"] = products(
            x, weights, lambda a, b: (b @ a.t()).t().contiguous()
        )
        stored = [w.t().contiguous() for w in weights]
        ways["cublas, weights [K, N]"] = products(x, stored, lambda a, b: a @ b)
        del stored
        for config in GRIDS[args.configs]:
            if fits((n, k), config):
                reference = (x @ weights[0].t()).float()
                error = (triton_mm(x, weights[0], config).float() - reference).abs().max().item()
                scale = reference.abs().max().item()
                if error > 0.02 * scale:
                    ways[f"triton {config} WRONG"] = float("nan")
                    continue
                ways[f"triton {config}"] = products(
                    x, weights, functools.partial(triton_mm, config=config)
                )
        results["shapes"][name] = {"n": n, "k": k, "bytes": n * k * 2, "us": ways}
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")  # so far
        print(f"{name}: " + ", ".join(f"{w} {v:.2f} us" for w, v in ways.items()),
              file=sys.stderr)  # fmt: skip
    return results


def render(results: dict[str, Any]) -> str:
    peak = results["peak_gb_s"]
    lines = [
        f"# Matrix products at {results['rows']} rows on {results['device_name']}",
        "",
        f"torch {results['torch_version']}, triton {results['triton_version']}; "
        f"{results['layers']} products with distinct weights per CUDA graph; share of "
        f"{peak:.0f} GB/s.",
        "",
        "| shape (N x K) | way | us a product | GB/s | of peak |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    sums: dict[str, float] = {}
    for name, shape in results["shapes"].items():
        us = shape["us"]
        tritons = {w: v for w, v in us.items() if w.startswith("triton") and v == v}
        ways = [(way, way) for way in us if not way.startswith("triton")]
        if tritons:
            ways.append((min(tritons, key=tritons.__getitem__), "best triton"))
        for way, label in ways:
            if way not in us:  # cuBLASLt: on a GPU only
                continue
            rate = shape["bytes"] / us[way] / 1e3
            shape_label = f"{name} ({shape['n']} x {shape['k']})"
            lines.append(
                f"| {shape_label} | {way} | {us[way]:.2f} | {rate:.0f} | {rate / peak:.0%} |"
            )
            sums[label] = sums.get(label, 0.0) + us[way]
    total = sum(shape["bytes"] for shape in results["shapes"].values())
    lines += ["", "A layer's four products:", "", "| way | us | GB/s | of peak |"]
    lines.append("| --- | ---: | ---: | ---: |")
    for way, us_sum in sums.items():
        rate = total / us_sum / 1e3
        lines.append(f"| {way} | {us_sum:.2f} | {rate:.0f} | {rate / peak:.0%} |")
    lines += ["", "Every Triton configuration (us a product):", ""]
    for name, shape in results["shapes"].items():
        timed = sorted((v, w) for w, v in shape["us"].items() if w.startswith("triton"))
        lines.append(f"- {name}: " + ", ".join(f"{w[7:]} {v:.2f}" for v, w in timed))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--peak-gb-s", type=float, default=4800.0)
    parser.add_argument("--check", action="store_true", help="only compare with torch.mm")
    parser.add_argument("--configs", choices=sorted(GRIDS), default="small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=24, help="distinct weights per shape")
    args = parser.parse_args(argv)
    if args.check:
        device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
        return check(device, GRIDS[args.configs])
    if args.out is None:
        parser.error("--out is required unless --check")
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out, measure(args), render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
