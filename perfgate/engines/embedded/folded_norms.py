"""A decoder layer with its norms folded into the products after them: two kernels a layer less.

A layer of the target runs, per token, ``h = x + attention(norm1(x))`` then ``h + mlp(norm2(h))``,
each norm ``x * r * w`` with ``r = 1 / sqrt(mean(x^2) + eps)`` one scale per token. Compiled,
each norm is one kernel (with the residual add before it) between the products, and at batch
8 on an H200 a kernel that small costs about 1.7 us plus a gap of about 0.4 us, 24 layers twice.

Both are linear up to r, so (as FlashNorm does, Graef et al. 2024) the weight w goes into the
product's weight once (``fold_norms`` in ``model.py``: ``W' = W * w``), the product reads the
residual stream itself, and r scales the product's output instead, in the kernel that reads
that output anyway:

- ``norm_rope``: the queries, keys and values scaled by r and rotated, the keys and values
  written into the KV cache (it replaces Inductor's rotary kernel and the first norm's);
- ``norm_silu``: the gate and up halves scaled by r, then ``silu(gate) * up`` (it replaces the
  activation's kernel and the second norm's);
- ``add_product_``: the residual adds, ``x += a @ W.T``, done by the product itself (cuBLAS's
  ``beta = 1``), in place: no kernel for the add.

Each kernel computes r from the row of the residual stream it needs (a few KB, from the L2
cache). The numbers differ from the unfolded layer's by rounding: the product of bf16 ``x`` and
``W * w`` against that of bf16 ``x * r * w`` and ``W``. The kernels are Triton's
(``TRITON_INTERPRET=1`` runs them on a CPU, as the tests do); ``fold_norms`` folds a model on
CUDA only, and not a layer split over tensor-parallel ranks, whose residual adds follow an
all-reduce.

On an H200 the large configuration's decode step at batch 8 went from 1.363-1.372 ms to
1.289-1.299 ms, and a verify of 4 tokens from 1.471-1.481 ms to 1.364-1.370 ms
(benchmarks/results/h200-real-weights.md, 2026-12-01 (fourth)).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

# The kernels' configuration: on an H200 the folded decode step took 1.294-1.300 ms for
# BLOCK_F of 256 to 1024 and 2 to 8 warps, 1.309 ms at 2048 (benchmarks/folded_configs.py).
BLOCK_F = 512  # activation columns a norm_silu program takes
NUM_WARPS = 4  # of each kernel's programs


@torch.library.custom_op("perfgate::add_product_", mutates_args=("x",))
def add_product_(x: Tensor, a: Tensor, weight: Tensor) -> None:
    """x += a @ weight.T in place, x [..., N] contiguous, a [..., K], weight [N, K]: one
    matrix product that adds its result to x (cuBLAS's beta = 1)."""
    rows = x.view(-1, x.shape[-1])
    rows.addmm_(a.reshape(-1, a.shape[-1]), weight.t())


@add_product_.register_fake
def _(x: Tensor, a: Tensor, weight: Tensor) -> None:
    return None


@torch.library.custom_op("perfgate::norm_rope", mutates_args=("k_cache", "v_cache"))
def norm_rope(
    qkv: Tensor,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    eps: float,
    heads: int,
) -> Tensor:
    """Scale qkv [B, T, 3 * heads * D] by the RMS scale of x [B, T, DM]'s rows, rotate its
    queries and keys by cos and sin [B, T, D], write its keys and values to k_cache and
    v_cache [B', heads, S, D] at slots [B, T]; return the queries [B, T, heads, D]."""
    from perfgate.engines.embedded import triton_kernels  # Triton's import, at the first call

    batch, tokens, width = qkv.shape
    dim = width // (3 * heads)
    _check_rows(qkv, x)
    cos, sin, slots = cos.contiguous(), sin.contiguous(), slots.contiguous()
    if k_cache.stride() != v_cache.stride() or k_cache.stride(3) != 1:
        raise ValueError("norm_rope needs k_cache and v_cache alike, head_dim contiguous")
    q = torch.empty(batch, tokens, heads, dim, dtype=qkv.dtype, device=qkv.device)
    triton_kernels.norm_rope_kernel[(batch * tokens, heads)](
        qkv, x, cos, sin, slots, q, k_cache, v_cache, eps,
        qkv.stride(0), qkv.stride(1), x.stride(0), x.stride(1), cos.stride(0), cos.stride(1),
        slots.stride(0), q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        tokens, heads,
        DM=x.shape[-1], BLOCK_DM=_pow2(x.shape[-1]), D=dim, BLOCK_D=_pow2(dim),
        num_warps=NUM_WARPS,
    )  # fmt: skip
    return q


@norm_rope.register_fake
def _(
    qkv: Tensor,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    eps: float,
    heads: int,
) -> Tensor:
    batch, tokens, width = qkv.shape
    return qkv.new_empty(batch, tokens, heads, width // (3 * heads))


@torch.library.custom_op("perfgate::norm_silu", mutates_args=())
def norm_silu(gate_up: Tensor, x: Tensor, eps: float) -> Tensor:
    """silu(r * gate) * (r * up) for gate_up [B, T, 2F] (gate then up), r the RMS scale of
    x [B, T, DM]'s rows; return [B, T, F] in gate_up's dtype."""
    from perfgate.engines.embedded import triton_kernels  # Triton's import, at the first call

    _check_rows(gate_up, x)
    width = gate_up.shape[-1] // 2
    rows = gate_up.view(-1, gate_up.shape[-1])
    out = gate_up.new_empty(*gate_up.shape[:-1], width)
    grid = (rows.shape[0], -(-width // BLOCK_F))
    triton_kernels.norm_silu_kernel[grid](
        rows, x, out, eps, rows.stride(0), x.shape[-1], width, width,
        DM=x.shape[-1], BLOCK_DM=_pow2(x.shape[-1]), BLOCK_F=BLOCK_F, num_warps=NUM_WARPS,
    )  # fmt: skip
    return out


@norm_silu.register_fake
def _(gate_up: Tensor, x: Tensor, eps: float) -> Tensor:
    return gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)


def kernels_run(x: Tensor) -> bool:
    """Whether the kernels run on x's device: Triton's on CUDA, its interpreter on a CPU."""
    from perfgate.engines.embedded import triton_attention

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return triton_attention.available() and (x.is_cuda or interpreted)


def _check_rows(product: Tensor, x: Tensor) -> None:
    """The kernels take the product's rows at a stride, each contiguous, and x whole."""
    if product.shape[:-1] != x.shape[:-1] or product.stride(-1) != 1 or not x.is_contiguous():
        raise ValueError(
            f"folded norms: a product {tuple(product.shape)} with contiguous rows over a "
            f"contiguous residual stream of the same tokens, not {tuple(x.shape)}"
        )


def _pow2(n: int) -> int:
    """The block that holds n entries: Triton's ranges are powers of 2."""
    import triton

    return int(triton.next_power_of_2(n))
