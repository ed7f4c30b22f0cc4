"""Folded norms (``folded_norms``, ``fold_norms``): a CUDA server's target layers with their norms
in the products after them compute what the unfolded layers did.

The Triton kernels' checks run under Triton's interpreter in a child process
(``interpreted.py``); here, PyTorch's path for the same layers (where the kernels cannot run)
and what is folded and what is not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfgate.engines.embedded import engine, folded_norms
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.model import Transformer, fold_norms, fuse_projections
from perfgate.engines.embedded.parallel import shard_model

from .common import CPU, DRAFT, TARGET
from .interpreted import FOLDED_CHECKS, _compare, assert_checks_hold
from .test_tp_shard import _groups


def _stacked() -> Transformer:
    target = load_target(TARGET, CPU, torch.float32)
    target.setup_cache(3, 256)
    fuse_projections(target)
    return target


@pytest.mark.slow
def test_the_kernels_under_tritons_interpreter() -> None:
    """The FOLDED_CHECKS of interpreted.py, in one child (one start of Python, torch and
    Triton): each must hold."""
    assert_checks_hold(list(FOLDED_CHECKS))


def test_without_the_kernels_the_folded_layers_compute_the_unfolded_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfgate.engines.embedded.model import causal_view

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    unfolded, folded = _stacked(), _stacked()
    fold_norms(folded)
    assert not folded_norms.kernels_run(next(folded.parameters()))
    _compare(unfolded, folded, lambda positions: causal_view(positions, 128))


def test_folding_scales_the_stacked_weights_by_their_norms_once() -> None:
    target = _stacked()
    block = target.layers[0]
    qkv, gate_up = (
        w.weight.detach().clone() for w in (block.attention.wqkv, block.feed_forward.w13)
    )
    attention_norm, ffn_norm = block.attention_norm.weight, block.ffn_norm.weight
    assert not torch.allclose(attention_norm, torch.ones_like(attention_norm))  # trained

    assert fold_norms(target) == target.config.n_layer
    assert fold_norms(target) == 0  # a second call changes nothing
    assert block.folded
    torch.testing.assert_close(block.attention.wqkv.weight, qkv * attention_norm)
    torch.testing.assert_close(block.feed_forward.w13.weight, gate_up * ffn_norm)


def test_unstacked_sharded_and_draft_layers_are_not_folded() -> None:
    unstacked = load_target(TARGET, CPU, torch.float32)
    assert fold_norms(unstacked) == 0  # fuse_projections first
    sharded = load_target(TARGET, CPU, torch.float32)
    shard_model(sharded, _groups()[0])
    fuse_projections(sharded)
    assert fold_norms(sharded) == 0  # its residual adds follow an all-reduce
    target = _stacked()
    head = load_draft(DRAFT, target, CPU, torch.float32)
    fuse_projections(head)
    assert fold_norms(head) == 0
    assert not any(getattr(m, "folded", False) for m in head.modules())


def test_a_cpu_server_does_not_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folding is for CUDA: on a CPU the sums would round differently, for no gain."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # even where the kernels could run
    target = load_target(TARGET, CPU, torch.float32)
    engine._prepare(target, None, False, "torch_native")
    assert not any(block.folded for block in target.layers)


def test_the_kernels_refuse_rows_they_cannot_read() -> None:
    x = torch.zeros(2, 3, 64).transpose(0, 1)  # [3, 2, 64], not contiguous
    with pytest.raises(ValueError, match="contiguous residual stream"):
        folded_norms.norm_silu(torch.zeros(3, 2, 32), x, 1e-5)
    cache = torch.zeros(3, 4, 16, 8)
    with pytest.raises(ValueError, match="contiguous residual stream"):
        folded_norms.norm_rope(
            torch.zeros(3, 2, 96), torch.zeros(3, 5, 64), torch.zeros(3, 2, 8),
            torch.zeros(3, 2, 8), torch.zeros(3, 2, dtype=torch.long), cache, cache, 1e-5, 4,
        )  # fmt: skip


def test_a_residual_add_by_the_product_updates_the_stream_in_place() -> None:
    generator = torch.Generator().manual_seed(0)
    x, a = torch.randn(2, 3, 8, generator=generator), torch.randn(2, 3, 5, generator=generator)
    weight = nn.Linear(5, 8, bias=False).weight.detach()
    expected = x + a @ weight.t()
    before = x.data_ptr()
    folded_norms.add_product_(x, a, weight)
    assert x.data_ptr() == before
    torch.testing.assert_close(x, expected)
