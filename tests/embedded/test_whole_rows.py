"""whole_row_reductions: Inductor's Triton code for a norm over a 2048-wide row, the large
model's, is one pass (a persistent reduction) with it and two passes without, and code
compiled each way has its own cache key.

No GPU here: Inductor writes Triton code for the CPU (``cpu_backend = "triton"``) with Triton's
backend hash faked, and the code is read from its cache directory; the kernels' run under the
interpreter is not the point and fails."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .common import server_env

pytestmark = pytest.mark.slow

COMPILE_A_NORM = """
import sys
import torch
import torch.utils._triton
from torch._inductor import config
from torch._inductor.codegen import triton as codegen

from perfgate.engines.embedded.compiling import whole_row_reductions

config.cpu_backend = "triton"
torch.utils._triton.triton_hash_with_backend = codegen.triton_hash_with_backend = lambda: "cpu"
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


def _kernels(cache: Path, whole_rows: bool) -> tuple[list[str], list[str]]:
    """The Triton kernels Inductor wrote for the norm, and its FX graph cache's keys."""
    env = {**server_env(), "TRITON_INTERPRET": "1", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    command = [sys.executable, "-c", COMPILE_A_NORM, "on" if whole_rows else "off"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    code = "".join(p.read_text() for p in cache.rglob("*.py"))
    kernels = sorted(set(re.findall(r"def (triton_\w+)\(", code)))
    assert kernels, done.stdout + done.stderr
    keys = sorted(p.name for p in (cache / "fxgraph").glob("*/*"))
    return kernels, keys


def test_a_norm_is_one_pass_with_whole_rows_and_two_without(tmp_path: Path) -> None:
    looped, looped_keys = _kernels(tmp_path / "off", whole_rows=False)
    whole, whole_keys = _kernels(tmp_path / "on", whole_rows=True)
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
