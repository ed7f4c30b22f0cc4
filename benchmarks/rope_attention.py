"""Rotary embedding and the KV cache write inside the attention kernel: worth a kernel a layer?

    python benchmarks/rope_attention.py --out DIR                  # on a CUDA machine, ~1 minute
    TRITON_INTERPRET=1 python benchmarks/rope_attention.py --check # its numbers, on a CPU
    TRITON_INTERPRET=1 python benchmarks/rope_attention.py --out DIR --device cpu \
        --model perfgate/llama-tiny --replays 1 --blocks 1       # the timing's path, on a CPU

On the triton attention backend a layer's attention is three kernels after the stacked query,
key and value product: Inductor's (rotary on the queries and keys, fused with their write into
the cache), ``attend_kernel``, then the output product. On an H200 the first takes 1.2 us a
layer and a gap between kernels about 0.35 us (benchmarks/results/h200-real-weights.md), so one
kernel that does all three could save up to about 37 us of a 1.37 ms decode step, if it does
not lengthen the attention kernel's chain of dependent loads, which is what bounds it (the
variants measured there that added a load before the cache's keys were fetched were slower).

``rope_attend_kernel`` below keeps that chain as it is: one program per (sequence, head), as
``attend_kernel``, reads the forward's new queries, keys and values straight from the stacked
product's output with their rotary tables, rotates them, writes the keys and values into the
cache, and attends. The cache is read as before, but the slots the forward writes are masked
out of it (their old contents may be read before this program's own write lands) and the new
keys and values are added from registers at the end. It takes at most 16 tokens a sequence
(one block of queries), so decode and verify, not prefill.

This times, on perfgate/llama-large's shapes with seeded weights, batch --batch at --position,
for decode (1 token) and verify (--verify-tokens), the attention of 24 layers (each its own
weights and cache) replayed as one CUDA graph, compiled as the engine compiles it:

- ``engine``: ``Attention.forward`` on the triton backend, as served;
- ``fused``: the same module with the three kernels replaced by ``rope_attend_kernel``.

Both include the two matrix products, the same in both. Writes results.json and results.md.
``--check`` compares the fused attention's output and cache with the engine's on the tiny
model's shapes in float32 (a decode, a verify, a per-head tree mask), under Triton's
interpreter on a CPU, and exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any, cast

import torch
import triton
import triton.language as tl
from decode_bandwidth import Timer, require_interpreter_on_cpu, step_arguments, write_results
from torch import Tensor, nn

from perfgate.engines.embedded.compiling import RECOMPILE_LIMIT
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import load_target
from perfgate.engines.embedded.model import (
    Attention,
    AttentionView,
    Rope,
    causal_view,
    fuse_projections,
    kv_bucket,
    rope_tables,
    use_attention_backend,
)
from perfgate.engines.embedded.triton_attention import BLOCK_L, NUM_STAGES, NUM_WARPS
from perfgate.engines.embedded.triton_kernels import rotary_partner, rotated, softmax_step

BLOCK_T = 16  # the most tokens a sequence the fused kernel takes


@triton.jit
def rope_attend_kernel(
    qkv_ptr,
    cos_ptr,
    sin_ptr,
    slots_ptr,
    k_ptr,
    v_ptr,
    mask_ptr,
    out_ptr,
    scale,
    x_sb,
    x_st,
    r_sb,
    r_st,
    s_sb,
    k_sb,
    k_sh,
    k_ss,
    m_sb,
    m_sh,
    m_st,
    o_sb,
    o_st,
    T,
    L,
    H,
    D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """Rotate, store and attend the T (<= BLOCK_T) new tokens of head program_id(1) of
    sequence program_id(0): qkv [B, T, 3 * H * D] is the stacked product's output, cos and sin
    [B, T, D] float32 its rotary tables, slots [B, T] where its keys and values go in k and v
    [B', H, S, D] (v's strides are k's), mask [B, 1 or H, T, L] additive; out [B, T, H, D]."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_t = tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, D)
    in_t = offs_t < T
    partner = rotary_partner(offs_d, D)
    rows = qkv_ptr + b * x_sb + offs_t[:, None] * x_st
    at_r = b * r_sb + offs_t[:, None] * r_st + offs_d[None, :]
    cos = tl.load(cos_ptr + at_r, mask=in_t[:, None], other=0.0)
    sin = tl.load(sin_ptr + at_r, mask=in_t[:, None], other=0.0)
    q_at = rows + h * D
    k_at = rows + (H + h) * D
    q = tl.load(q_at + offs_d[None, :], mask=in_t[:, None], other=0.0)
    q_turned = tl.load(q_at + partner[None, :], mask=in_t[:, None], other=0.0)
    k_new = tl.load(k_at + offs_d[None, :], mask=in_t[:, None], other=0.0)
    k_turned = tl.load(k_at + partner[None, :], mask=in_t[:, None], other=0.0)
    v_new = tl.load(rows + (2 * H + h) * D + offs_d[None, :], mask=in_t[:, None], other=0.0)
    slots = tl.load(slots_ptr + b * s_sb + offs_t, mask=in_t, other=-1)
    # The engine's rotation: in float32, then back to the product's dtype.
    at_d = offs_d[None, :]
    q = rotated(q.to(tl.float32), q_turned.to(tl.float32), cos, sin, at_d, D).to(v_new.dtype)
    k_new = rotated(k_new.to(tl.float32), k_turned.to(tl.float32), cos, sin, at_d, D)
    k_new = k_new.to(v_new.dtype)
    cache_at = b * k_sb + h * k_sh + slots[:, None] * k_ss + offs_d[None, :]
    tl.store(k_ptr + cache_at, k_new, mask=in_t[:, None])
    tl.store(v_ptr + cache_at, v_new, mask=in_t[:, None])

    top = tl.full((BLOCK_T,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_T,), tl.float32)
    acc = tl.zeros((BLOCK_T, D), tl.float32)
    for start in range(0, L, BLOCK_L):
        offs_l = start + tl.arange(0, BLOCK_L)
        # The slots this forward writes are added from registers below, not read here.
        written = tl.max(tl.where(offs_l[None, :] == slots[:, None], 1, 0), axis=0) > 0
        in_l = offs_l < L
        k = tl.load(
            k_ptr + b * k_sb + h * k_sh + offs_l[:, None] * k_ss + offs_d[None, :],
            mask=in_l[:, None],
            other=0.0,
        )
        v = tl.load(
            v_ptr + b * k_sb + h * k_sh + offs_l[:, None] * k_ss + offs_d[None, :],
            mask=in_l[:, None],
            other=0.0,
        )
        bias = tl.load(
            mask_ptr + b * m_sb + h * m_sh + offs_t[:, None] * m_st + offs_l[None, :],
            mask=in_t[:, None] & in_l[None, :],
            other=float("-inf"),
        ).to(tl.float32)
        bias = tl.where(written[None, :], float("-inf"), bias)
        top, total, acc = softmax_step(q, k, v, bias, scale, top, total, acc)
    # The new tokens, each seen by the queries the mask lets see its slot.
    bias = tl.load(
        mask_ptr + b * m_sb + h * m_sh + offs_t[:, None] * m_st + slots[None, :],
        mask=in_t[:, None] & in_t[None, :],
        other=float("-inf"),
    ).to(tl.float32)
    top, total, acc = softmax_step(q, k_new, v_new, bias, scale, top, total, acc)
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    tl.store(
        out_ptr + b * o_sb + offs_t[:, None] * o_st + h * D + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=in_t[:, None],
    )


@torch.library.custom_op("perfgate_bench::rope_attend", mutates_args=("k_cache", "v_cache"))
def rope_attend(
    qkv: Tensor,
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    mask: Tensor,
    heads: int,
) -> Tensor:
    """rope_attend_kernel over qkv [B, T, 3 * heads * D]; returns [B, T, heads * D]."""
    batch, tokens, width = qkv.shape
    dim = width // (3 * heads)
    assert tokens <= BLOCK_T and k_cache.stride() == v_cache.stride()
    qkv, cos, sin, slots = (t.contiguous() for t in (qkv, cos, sin, slots))
    out = torch.empty(batch, tokens, heads * dim, dtype=qkv.dtype, device=qkv.device)
    mask = mask.expand(batch, mask.shape[1], tokens, mask.shape[-1])
    mask_sh = mask.stride(1) if mask.shape[1] == heads else 0
    rope_attend_kernel[(batch, heads)](
        qkv, cos, sin, slots, k_cache, v_cache, mask, out, 1.0 / math.sqrt(dim),
        qkv.stride(0), qkv.stride(1), cos.stride(0), cos.stride(1), slots.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        mask.stride(0), mask_sh, mask.stride(2), out.stride(0), out.stride(1),
        tokens, mask.shape[-1], heads,
        D=dim, BLOCK_T=BLOCK_T, BLOCK_L=BLOCK_L, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return out


@rope_attend.register_fake
def _(
    qkv: Tensor,
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    mask: Tensor,
    heads: int,
) -> Tensor:
    return qkv.new_empty(qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3)


class FusedAttention(nn.Module):
    """An engine Attention whose rotary, cache write and attention are one kernel."""

    def __init__(self, attention: Attention) -> None:
        super().__init__()
        self.inner = attention

    def forward(self, x: Tensor, rope: Rope, view: AttentionView) -> Tensor:
        inner, cache = self.inner, self.inner.kv_cache
        assert inner.wqkv is not None and cache is not None
        k, v = cast(Tensor, cache.k), cast(Tensor, cache.v)
        qkv = inner.wqkv(x)
        out = rope_attend(qkv, rope.cos, rope.sin, view.slots, k, v, view.mask, inner.n_head)
        return cast(Tensor, inner.wo(out))


def layers(model: str, device: torch.device, dtype: torch.dtype, batch: int) -> list[Attention]:
    """The target's attention modules, stacked, on the triton backend, with caches."""
    target = load_target(model, device, dtype, load_format="dummy")
    target.setup_cache(batch)
    fuse_projections(target)
    use_attention_backend(target, "triton")
    return [m for m in target.modules() if isinstance(m, Attention)]


def inputs(
    attention: Attention, batch: int, position: int, tokens: int, seed: int = 0
) -> tuple[Tensor, Rope, AttentionView]:
    """A forward's input, rotary tables and additive causal view at position."""
    weight = next(attention.parameters())
    generator = torch.Generator(device=weight.device).manual_seed(seed)
    dim = attention.n_head * attention.head_dim
    x = torch.randn(batch, tokens, dim, generator=generator, device=weight.device)
    positions = position + torch.arange(tokens, device=weight.device).expand(batch, tokens)
    tables = rope_tables(attention.head_dim, position + tokens, 10000.0, weight.device)
    rope = Rope(tables.cos[positions], tables.sin[positions])
    view = causal_view(positions, kv_bucket(position + tokens, 1 << 20)).additive(weight.dtype)
    return x.to(weight.dtype), rope, view


def check() -> int:
    """The fused attention against the engine's on tiny shapes, float32, interpreted."""
    worst = 0.0
    for tokens, tree in ((1, False), (4, False), (5, True)):
        engine = layers("perfgate/llama-tiny", torch.device("cpu"), torch.float32, 2)[0]
        fused = layers("perfgate/llama-tiny", torch.device("cpu"), torch.float32, 2)[0]
        x, rope, view = inputs(engine, 2, 60, tokens, seed=tokens)
        for module in (engine, fused):  # old entries in the cache, as a served sequence has
            cache = cast(Any, module.kv_cache)
            cache.k.copy_(torch.randn_like(cache.k, generator=torch.Generator().manual_seed(1)))
            cache.v.copy_(torch.randn_like(cache.v, generator=torch.Generator().manual_seed(2)))
        if tree:  # a per-head mask: each head's nodes see their own half of the prefix
            seen = torch.rand(2, engine.n_head, tokens, view.mask.shape[-1]) < 0.5
            seen[..., 60 : 60 + tokens] = torch.ones(tokens, tokens, dtype=torch.bool).tril()
            seen[..., 60 + tokens :] = False
            mask = torch.full(seen.shape, float("-inf")).masked_fill_(seen, 0.0)
            view = AttentionView(view.slots, mask)
        with torch.inference_mode():
            expected = engine(x, rope, view)
            got = FusedAttention(fused)(x, rope, view)
        caches = [cast(Any, m.kv_cache) for m in (engine, fused)]
        errors = [
            (got - expected).abs().max().item(),
            (caches[0].k - caches[1].k).abs().max().item(),
            (caches[0].v - caches[1].v).abs().max().item(),
        ]
        print(f"tokens {tokens}, tree {tree}: output, k, v max error {errors}", file=sys.stderr)
        worst = max(worst, *errors)
    print(f"worst error {worst:.2e}")
    return 0 if worst < 1e-4 else 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    attentions = layers(args.model, device, dtype, args.batch)
    fused = [FusedAttention(a) for a in attentions]
    for module in [*attentions, *fused]:
        module.compile()
    timer = Timer(device, args.replays, args.blocks, args.warmups)
    results: dict[str, Any] = {
        "model": args.model,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "triton_version": triton.__version__,
        "batch": args.batch,
        "position": args.position,
        "layers": len(attentions),
        "us_a_layer": {},
    }
    for tokens in (1, args.verify_tokens):
        x, rope, view = inputs(attentions[0], args.batch, args.position, tokens)
        for name, modules in (("engine", attentions), ("fused", fused)):
            us = graphed_us(modules, x, rope, view, timer)
            results["us_a_layer"][f"{name}, {tokens} tokens"] = us
            print(f"{name}, {tokens} tokens: {us:.2f} us a layer", file=sys.stderr)
    return results


def graphed_us(
    modules: list[Attention] | list[FusedAttention],
    x: Tensor,
    rope: Rope,
    view: AttentionView,
    timer: Timer,
) -> float:
    """Microseconds a layer of the modules' attention on x, replayed as one CUDA graph (run
    eagerly on a CPU)."""
    graphs = GraphRunner("cuda" if x.is_cuda else "off")

    def forward(x: Tensor) -> tuple[Tensor, ...]:
        return tuple(module(x, rope, view) for module in modules)

    with torch.inference_mode():
        ms = timer(lambda: graphs.run("attention", forward, x))
    return ms * 1e3 / len(modules)


def render(results: dict[str, Any]) -> str:
    lines = [
        f"# Rotary and the cache write inside attention: {results['model']} on "
        f"{results['device_name']}",
        "",
        f"torch {results['torch_version']}, triton {results['triton_version']}; batch "
        f"{results['batch']} at position {results['position']}; the attention of "
        f"{results['layers']} layers (their two matrix products included)"
        + (" run eagerly." if results["device_name"] == "cpu" else " as one CUDA graph."),
        "",
        "| attention | us a layer |",
        "| --- | ---: |",
    ]
    for name, us in results["us_a_layer"].items():
        lines.append(f"| {name} | {us:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    step_arguments(parser, interpreted_on_cpu=True)
    parser.add_argument("--check", action="store_true", help="only compare with the engine's")
    args = parser.parse_args(argv)
    if args.check:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--check runs under TRITON_INTERPRET=1")
        return check()
    if args.out is None:
        parser.error("--out is required unless --check")
    require_interpreter_on_cpu(parser, args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out, measure(args), render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
