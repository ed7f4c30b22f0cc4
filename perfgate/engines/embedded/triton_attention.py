"""``--attention-backend triton``: attention over the KV cache in one Triton kernel per layer.

A decode step attends 1 query per sequence (a verify, a few) to a few hundred cached keys.
PyTorch's ``scaled_dot_product_attention`` with the engine's additive mask runs a prefill
kernel there (cuDNN's, compiled): its tiles are 64 queries tall, and on an H200 it reads the
cache at about a third of the memory's bandwidth (benchmarks/results/h200-real-weights.md).
This kernel is shaped for few queries, as SGLang's triton and FlashInfer decode backends are:
one program per (sequence, head, block of 16 queries) streams that head's keys and values
through an online softmax (FlashAttention's), so each cached entry is read once, in float32
accumulation, with the mask added to the scores as SDPA adds it.

The kernel takes the cache buffers whole and the mask's width as the slots to read, and writes
its output as [B, T, heads, head_dim], the layout the output projection reads. ``attend`` is
the one entry point; it imports Triton (``triton_kernels``) at its first call. Without Triton
(a CPU-only install) ``available()`` is False and the engine refuses the backend by name. On a
CPU, Triton's interpreter (``TRITON_INTERPRET=1``) runs the same kernel, which is how the
tests check it.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch
from torch import Tensor

BLOCK_T = 16  # queries a program takes: tl.dot's smallest tile
# Cache slots a loop step reads, warps and pipeline stages: the fastest of six configurations
# on an H200 (benchmarks/results/h200-real-weights.md, 2026-12-01). Splitting each head's
# slots over several programs (FlashDecoding's split, with a kernel to add the parts) was
# slower there at 4 and 8 parts (31% of peak against 37% unsplit), so one program reads them all.
BLOCK_L = 64
NUM_WARPS = 4
NUM_STAGES = 3


# Looked up once, at import (a folded layer asks in every forward), without importing Triton.
_HAS_TRITON = importlib.util.find_spec("triton") is not None


def available() -> bool:
    """Whether this install has Triton, so that the backend can run.

    A plain function of a constant: torch.compile traces it inside a compiled layer, where a
    cached function (functools.cache) drew a warning into every GPU server's log.
    """
    return _HAS_TRITON


@torch.library.custom_op("perfgate::triton_attend", mutates_args=())
def attend(q: Tensor, k_cache: Tensor, v_cache: Tensor, mask: Tensor) -> Tensor:
    """Attend q [B, H, T, D] to the first mask.shape[-1] slots of k_cache and v_cache
    [B', H, S, D] (B' >= B), with mask [B, 1 or H, T, slots] added to the scores (0 where a
    query sees a slot, -inf where not); return [B, T, H, D] in q's dtype.

    Its numbers are SDPA's to float32 rounding; a query that sees no slot gets zeros. A
    custom op: ``torch.compile`` keeps it whole between the kernels it fuses around it.
    """
    batch, heads, queries, dim = q.shape
    slots = mask.shape[-1]
    if not available():
        raise RuntimeError("the triton attention backend needs Triton: pip install triton")
    if dim & (dim - 1) or dim < 16:
        raise ValueError(f"the triton attention backend needs a power-of-2 head_dim >= 16: {dim}")
    if mask.dtype == torch.bool or mask.stride(-1) != 1:
        raise ValueError("the triton attention backend takes an additive mask, slots contiguous")
    from perfgate.engines.embedded import triton_kernels  # Triton's import, at the first call

    out = torch.empty(batch, queries, heads, dim, dtype=q.dtype, device=q.device)
    mask = mask.expand(batch, mask.shape[1], queries, slots)
    mask_sh = mask.stride(1) if mask.shape[1] == heads else 0
    grid = (batch, heads, -(-queries // BLOCK_T))
    triton_kernels.attend_kernel[grid](
        q, k_cache, v_cache, mask, out, 1.0 / math.sqrt(dim),
        *_strides(q), *_strides(k_cache), *_strides(v_cache),
        mask.stride(0), mask_sh, mask.stride(2),
        out.stride(0), out.stride(2), out.stride(1),
        queries, slots,
        D=dim, BLOCK_T=BLOCK_T, BLOCK_L=BLOCK_L, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return out


@attend.register_fake
def _(q: Tensor, k_cache: Tensor, v_cache: Tensor, mask: Tensor) -> Tensor:
    batch, heads, queries, dim = q.shape
    return q.new_empty(batch, queries, heads, dim)


def _strides(x: Tensor) -> tuple[Any, ...]:
    """The batch, head and slot (or query) strides of x [B, H, T, D], whose D is contiguous."""
    if x.stride(3) != 1:
        raise ValueError("the triton attention backend needs the head dimension contiguous")
    return x.stride(0), x.stride(1), x.stride(2)
