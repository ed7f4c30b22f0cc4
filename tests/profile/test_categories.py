"""Kernel and operator names fall into the documented categories."""

from __future__ import annotations

import pytest

from perfgate.profile.categories import (
    ATTENTION,
    COMMUNICATION,
    MATMUL,
    OTHER,
    categorize,
    inherited,
)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            COMMUNICATION,
        ),
        ("void cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", COMMUNICATION),
        ("c10d::allreduce_", COMMUNICATION),
        ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128>>(...)", ATTENTION),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(...)", ATTENTION),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>(...)", ATTENTION),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", ATTENTION),
        ("nvjet_tst_128x64_64x8_1x2_v_bz_coopA_TNT", MATMUL),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", MATMUL),
        ("void gemv2T_kernel_val<int, int, float, float, float>(...)", MATMUL),
        ("aten::addmm", MATMUL),
        ("aten::mm", MATMUL),
        ("aten::linear", MATMUL),
        ("aten::mul", OTHER),  # not aten::mm
        ("aten::mmap_like_name", OTHER),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            OTHER,
        ),
        ("Memcpy DtoD (Device -> Device)", OTHER),
    ],
)
def test_names_fall_into_their_category(name: str, category: str) -> None:
    assert categorize(name) == category


def test_only_attention_and_collectives_pass_their_category_on() -> None:
    assert inherited("aten::scaled_dot_product_attention") == ATTENTION
    assert inherited("c10d::allreduce_") == COMMUNICATION
    assert inherited("aten::linear") is None
    assert inherited("aten::add") is None
