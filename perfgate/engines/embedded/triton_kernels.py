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


@triton.jit
def row_rms_scale(x_ptr, eps, DM: tl.constexpr, BLOCK_DM: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) over the DM entries of the row at x_ptr, in float32: an
    RMSNorm's scale, whose weight the next product holds (``fold_norms``)."""
    offs = tl.arange(0, BLOCK_DM)
    x = tl.load(x_ptr + offs, mask=offs < DM, other=0.0).to(tl.float32)
    return tl.rsqrt(tl.sum(x * x, axis=0) / DM + eps)


@triton.jit
def rotary_partner(offs, D: tl.constexpr):
    """For offsets offs into a head of D entries, where rotate_half takes each entry from."""
    return (offs + D // 2) % D


@triton.jit
def rotated(x, turned, cos, sin, offs, D: tl.constexpr):
    """x rotated by its angles, as ``model.apply_rope``: x * cos + rotate_half(x) * sin, where
    turned is x loaded at ``rotary_partner(offs, D)`` and rotate_half is [-x2, x1]."""
    sign = tl.where(offs < D // 2, -1.0, 1.0)
    return x * cos + sign * turned * sin


@triton.jit
def norm_rope_kernel(
    qkv_ptr,
    x_ptr,
    cos_ptr,
    sin_ptr,
    slots_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    eps,
    qkv_sb,
    qkv_st,
    x_sb,
    x_st,
    r_sb,
    r_st,
    s_sb,
    q_sb,
    q_st,
    k_sb,
    k_sh,
    k_ss,
    T,
    H,
    DM: tl.constexpr,
    BLOCK_DM: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Head program_id(1) of token t of sequence b (program_id(0) = b * T + t): scale its
    query, key and value in qkv [B, T, 3 * H * D] (the product of the unnormalized residual
    stream x [B, T, DM] by the norm-folded weight) by x's RMS scale, rotate the query and key
    by cos and sin [B, T, D] (float32), write the query to q [B, T, H, D] and the key and value
    to k and v [B', H, S, D] (v's strides are k's) at slots [B, T]."""
    b = tl.program_id(0) // T
    t = tl.program_id(0) % T
    h = tl.program_id(1)
    r = row_rms_scale(x_ptr + b * x_sb + t * x_st, eps, DM, BLOCK_DM)
    offs = tl.arange(0, BLOCK_D)
    inside = offs < D
    partner = rotary_partner(offs, D)
    row = qkv_ptr + b * qkv_sb + t * qkv_st
    cos = tl.load(cos_ptr + b * r_sb + t * r_st + offs, mask=inside)
    sin = tl.load(sin_ptr + b * r_sb + t * r_st + offs, mask=inside)
    q = tl.load(row + h * D + offs, mask=inside).to(tl.float32) * r
    q_turned = tl.load(row + h * D + partner, mask=inside).to(tl.float32) * r
    k = tl.load(row + (H + h) * D + offs, mask=inside).to(tl.float32) * r
    k_turned = tl.load(row + (H + h) * D + partner, mask=inside).to(tl.float32) * r
    v = tl.load(row + (2 * H + h) * D + offs, mask=inside).to(tl.float32) * r
    slot = tl.load(slots_ptr + b * s_sb + t)
    dtype = q_ptr.dtype.element_ty
    q_at = q_ptr + b * q_sb + t * q_st + h * D + offs
    tl.store(q_at, rotated(q, q_turned, cos, sin, offs, D).to(dtype), mask=inside)
    cache_at = b * k_sb + h * k_sh + slot * k_ss + offs
    tl.store(k_ptr + cache_at, rotated(k, k_turned, cos, sin, offs, D).to(dtype), mask=inside)
    tl.store(v_ptr + cache_at, v.to(dtype), mask=inside)


@triton.jit
def norm_silu_kernel(
    gu_ptr,
    x_ptr,
    out_ptr,
    eps,
    gu_sm,
    x_sm,
    o_sm,
    F,
    DM: tl.constexpr,
    BLOCK_DM: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Columns program_id(1) * BLOCK_F.. of row program_id(0): out = silu(r * gate) * (r * up),
    gate and up the two halves [F] of gu's row (the product of the unnormalized residual
    stream x's row [DM] by the norm-folded weight), r x's RMS scale."""
    m = tl.program_id(0)
    r = row_rms_scale(x_ptr + m * x_sm, eps, DM, BLOCK_DM)
    offs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    inside = offs < F
    gate = tl.load(gu_ptr + m * gu_sm + offs, mask=inside, other=0.0).to(tl.float32) * r
    up = tl.load(gu_ptr + m * gu_sm + F + offs, mask=inside, other=0.0).to(tl.float32) * r
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + m * o_sm + offs, out.to(out_ptr.dtype.element_ty), mask=inside)
