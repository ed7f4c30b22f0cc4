"""The embedded engine's Triton kernels, imported by ``triton_attention`` at its first call.

Apart from the op that launches them so that importing the engine does not import Triton (a
tenth of a second, in every server and test process, for a backend that only CUDA runs), and
so that only they are exempt from mypy's typed definitions: their arguments are pointers and
constexprs. Under ``TRITON_INTERPRET=1``, read as Triton is imported, they run on a CPU.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def softmax_step(q, k, v, bias, scale, top, total, acc):
    """One step of the online softmax (FlashAttention's) over a block of keys k and values v:
    the scores of queries q [BLOCK_T, D] against k [BLOCK_L, D], with bias (float32, -inf where
    a query does not see a key) added; return each query's top score, total and unscaled sum
    (acc) updated from top, total and acc."""
    scores = tl.dot(q, tl.trans(k)) * scale + bias
    new_top = tl.maximum(top, tl.max(scores, axis=1))
    # A row that has seen no visible slot yet keeps -inf; shift it by 0 instead.
    shift = tl.where(new_top == float("-inf"), 0.0, new_top)
    p = tl.exp(scores - shift[:, None])
    rescale = tl.exp(top - shift)
    total = total * rescale + tl.sum(p, axis=1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
    return new_top, total, acc


@triton.jit
def attend_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    mask_ptr,
    out_ptr,
    scale,
    q_sb,
    q_sh,
    q_st,
    k_sb,
    k_sh,
    k_ss,
    v_sb,
    v_sh,
    v_ss,
    m_sb,
    m_sh,
    m_st,
    o_sb,
    o_sh,
    o_st,
    T,
    L,
    D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """Attend block program_id(2) of T queries of head program_id(1) of sequence
    program_id(0) to the first L slots of its cache; write out[b, t, h]."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_t = tl.program_id(2) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, D)
    in_t = offs_t < T
    q = tl.load(
        q_ptr + b * q_sb + h * q_sh + offs_t[:, None] * q_st + offs_d[None, :],
        mask=in_t[:, None],
        other=0.0,
    )
    top = tl.full((BLOCK_T,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_T,), tl.float32)
    acc = tl.zeros((BLOCK_T, D), tl.float32)
    for start in range(0, L, BLOCK_L):
        offs_l = start + tl.arange(0, BLOCK_L)
        in_l = offs_l < L
        k = tl.load(
            k_ptr + b * k_sb + h * k_sh + offs_l[:, None] * k_ss + offs_d[None, :],
            mask=in_l[:, None],
            other=0.0,
        )
        v = tl.load(
            v_ptr + b * v_sb + h * v_sh + offs_l[:, None] * v_ss + offs_d[None, :],
            mask=in_l[:, None],
            other=0.0,
        )
        bias = tl.load(
            mask_ptr + b * m_sb + h * m_sh + offs_t[:, None] * m_st + offs_l[None, :],
            mask=in_t[:, None] & in_l[None, :],
            other=float("-inf"),
        )
        top, total, acc = softmax_step(q, k, v, bias.to(tl.float32), scale, top, total, acc)
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    tl.store(
        out_ptr + b * o_sb + h * o_sh + offs_t[:, None] * o_st + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=in_t[:, None],
    )
