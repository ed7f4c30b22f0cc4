"""--attention-backend triton: its kernel attends as SDPA does, and decoding with it is unchanged.

The kernel runs here under Triton's interpreter, in a child process (``interpreted.py`` says
why); on a GPU it is compiled.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from perfgate.engines.embedded import triton_attention
from perfgate.engines.embedded.args import resolve_attention_backend
from perfgate.errors import ConfigError

from ..hang import HANG_S
from .common import CPU, SERVER_MODULE, TARGET, server_env
from .interpreted import CHECKS, assert_checks_hold


@pytest.mark.slow
def test_the_kernel_under_tritons_interpreter() -> None:
    """attends_as_sdpa, blind_query_gets_zeros, decoding_unchanged (interpreted.py), in one
    child (one start of Python, torch and Triton): each must hold."""
    assert_checks_hold(list(CHECKS))


def test_the_kernel_refuses_a_bool_mask_and_an_odd_head_size() -> None:
    q, k, v = (torch.zeros(1, 1, 1, 16) for _ in "qkv")
    with pytest.raises(ValueError, match="additive mask"):
        triton_attention.attend(q, k, v, torch.ones(1, 1, 1, 64, dtype=torch.bool))
    q, k, v = (torch.zeros(1, 1, 1, 24) for _ in "qkv")
    with pytest.raises(ValueError, match="power-of-2 head_dim"):
        triton_attention.attend(q, k, v, torch.zeros(1, 1, 1, 64))


def test_a_compiled_layer_asks_whether_triton_is_installed_without_a_warning() -> None:
    import warnings

    from perfgate.engines.embedded import folded_norms

    # A folded layer asks in every forward, inside its compiled code: a cached function there
    # drew Dynamo's warning into every GPU server's log. Dynamo warns as it traces, whatever
    # backend compiles the graph after: the eager one spares Inductor's minute on a CPU.
    torch._dynamo.reset()
    layer = torch.compile(
        lambda x: x * 2 if folded_norms.kernels_run(x) else x + 1, backend="eager"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer(torch.ones(2, 1, 8))
    assert not [w for w in caught if "lru_cache" in str(w.message)]


def test_the_backend_defaults_to_triton_on_cuda_only_where_triton_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = torch.device("cuda")
    monkeypatch.setattr(triton_attention, "available", lambda: True)
    assert resolve_attention_backend(None, CPU) == "torch_native"
    assert resolve_attention_backend(None, cuda) == "triton"
    assert resolve_attention_backend("torch_native", cuda) == "torch_native"
    monkeypatch.setattr(triton_attention, "available", lambda: False)
    assert resolve_attention_backend(None, cuda) == "torch_native"
    with pytest.raises(ConfigError, match="Triton is not installed") as caught:
        resolve_attention_backend("triton", cuda)
    assert caught.value.field == "--attention-backend"


def test_the_triton_backend_on_a_cpu_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="CUDA only") as caught:
        resolve_attention_backend("triton", CPU)
    assert caught.value.field == "--attention-backend"
    assert "torch_native" in str(caught.value.fix)


def test_a_server_asked_for_triton_on_a_cpu_exits_64_naming_the_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", SERVER_MODULE, "--model-path", TARGET, "--device", "cpu",
         "--attention-backend", "triton", "--port", "1"],
        env=server_env(), capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert done.returncode == 64, done.stderr[-2000:]
    assert "--attention-backend: triton runs on CUDA only" in done.stderr
