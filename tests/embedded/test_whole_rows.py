"""whole_row_reductions: Inductor's Triton code for a norm over a 2048-wide row, the large
model's, is one pass (a persistent reduction) with it and two passes without, and code
compiled each way has its own cache key.

No GPU here: Inductor writes Triton code for the CPU (``triton_kernels_written``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .common import Compiling, triton_kernels_written

pytestmark = pytest.mark.slow

COMPILE_A_NORM = """
import sys
import torch

from perfgate.engines.embedded.compiling import whole_row_reductions

whole_row_reductions(sys.argv[1] == "on")


def norm(x, residual, weight):
    h = x + residual
    scale = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-5)
    return (h.float() * scale).to(x.dtype) * weight, h


x = torch.randn(8, 2048)
try:
    torch.compile(norm)(x, torch.randn(8, 2048), torch.randn(2048))
except Exception:  # the kernel, run by Triton's interpreter on the CPU
    pass
"""


def test_a_norm_is_one_pass_with_whole_rows_and_two_without(tmp_path: Path) -> None:
    # Both ways in one child, each with its own cache directory, from a fresh start of Dynamo:
    # off, then on.
    looped, whole = (
        written.checked()
        for written in triton_kernels_written(
            Compiling(COMPILE_A_NORM, tmp_path / "off", ("off",)),
            Compiling(COMPILE_A_NORM, tmp_path / "on", ("on",)),
        )
    )
    looped_keys, whole_keys = (
        sorted(p.name for p in (tmp_path / way / "fxgraph").glob("*/*")) for way in ("off", "on")
    )
    assert looped == ["triton_red_fused_add_mean_mul_pow_rsqrt_0"]
    assert whole == ["triton_per_fused_add_mean_mul_pow_rsqrt_0"]
    assert looped_keys and whole_keys and not set(looped_keys) & set(whole_keys)


def test_compiling_the_layers_sets_whole_rows_on_unless_asked_not_to() -> None:
    from torch import nn
    from torch._inductor import config

    from perfgate.engines.embedded.compiling import compile_layers, whole_row_reductions
    from perfgate.engines.embedded.whole_rows import WholeRowChoices

    try:
        whole_row_reductions(False)
        compile_layers(nn.Linear(2, 2))
        assert config.inductor_choices_class is WholeRowChoices
        compile_layers(nn.Linear(2, 2), whole_rows=False)
        assert config.inductor_choices_class is None
    finally:
        whole_row_reductions(False)
