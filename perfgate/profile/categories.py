"""Kernel and operator names into four categories of work. Pure.

The first category whose pattern matches a name (lower-cased, searched anywhere in it)
wins, in this order:

====================  ====================================================================
category              matches
====================  ====================================================================
``communication``     NCCL and other collectives: ``nccl``, ``all_reduce``/``allreduce``,
                      ``all_gather``/``allgather``, ``reduce_scatter``, ``all_to_all``,
                      ``alltoall``, SGLang/vLLM custom all-reduce (``cross_device_reduce``,
                      ``custom_ar``, ``one_shot``/``two_shot``), ``c10d::``, ``gloo``
``attention``         ``flash``, ``fmha``, ``attention``, ``attn``, ``sdpa``, ``softmax``,
                      ``flashinfer``, ``mha_``, ``paged``: attention kernels, and on CPU
                      ``aten::scaled_dot_product_attention`` and its variants
``matmul``            ``gemm``, ``gemv``, ``nvjet`` (cuBLAS's Hopper kernels), ``cublas``,
                      ``cutlass``, ``xmma``, ``wgmma``, ``matmul``, ``splitk``; on CPU
                      ``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``,
                      ``mv``, ``addmv``, ``dot``
``other``             everything else: elementwise, reductions, copies, sampling...
====================  ====================================================================

Attention is tried before matmul, so a fused attention kernel built with CUTLASS
(``fmha_cutlassF...``) counts as attention. On CPU an operator inside an attention or
collective operator takes its parent's category (``trace.py`` does that), so the matrix
products that make up an attention count as attention there too; on GPU only the kernel's
own name is known.
"""

from __future__ import annotations

import re

COMMUNICATION = "communication"
ATTENTION = "attention"
MATMUL = "matmul"
OTHER = "other"
CATEGORIES = (MATMUL, ATTENTION, COMMUNICATION, OTHER)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        COMMUNICATION,
        re.compile(
            r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"
            r"|custom_ar|one_shot|two_shot|c10d::|gloo"
        ),
    ),
    (ATTENTION, re.compile(r"flash|fmha|attention|attn|sdpa|softmax|mha_|paged")),
    (
        MATMUL,
        re.compile(
            r"gemm|gemv|nvjet|cublas|cutlass|xmma|wgmma|matmul|splitk"
            r"|^aten::(mm|addmm|bmm|baddbmm|linear|mv|addmv|dot)$"
        ),
    ),
)


def categorize(name: str) -> str:
    """The category of a kernel or operator name (see the module's table).

    >>> categorize("ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    'communication'
    >>> categorize("fmha_cutlassF_bf16_aligned_64x64_rf_sm80")
    'attention'
    >>> categorize("nvjet_tst_128x64_64x8_1x2_v_bz_coopA_TNT")
    'matmul'
    >>> categorize("aten::addmm")
    'matmul'
    >>> categorize("void at::native::vectorized_elementwise_kernel<4, ...>")
    'other'
    """
    lowered = name.lower()
    for category, pattern in _PATTERNS:
        if pattern.search(lowered):
            return category
    return OTHER


def inherited(name: str) -> str | None:
    """The category an operator passes on to the operators it calls, if any.

    Attention and collectives do: the products and exponentials inside an attention are the
    attention's work. Other operators do not.
    """
    category = categorize(name)
    return category if category in (ATTENTION, COMMUNICATION) else None
