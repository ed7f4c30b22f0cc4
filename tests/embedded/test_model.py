"""The models: a KV cache that attends by position, EAGLE-3 features, shared modules."""

from __future__ import annotations

import pytest
import torch

from perfgate.engines.embedded.loading import load_target
from perfgate.engines.embedded.model import Eagle3Draft, Transformer

from .common import CPU, TARGET

TOKENS = torch.tensor([list(b"speculative decoding, cached")])


def _at(start: int, count: int) -> torch.Tensor:
    return torch.arange(start, start + count)


@torch.inference_mode()
def test_incremental_decoding_matches_one_full_forward(target: Transformer) -> None:
    full, _ = target(TOKENS, _at(0, TOKENS.shape[1]))
    target(TOKENS[:, :8], _at(0, 8))
    steps = [target(TOKENS[:, i : i + 1], _at(i, 1))[0] for i in range(8, TOKENS.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 8:], rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_stale_cache_entries_are_overwritten_before_they_are_seen(target: Transformer) -> None:
    prefix, suffix = TOKENS[:, :10], TOKENS[:, 10:14]
    expected, _ = target(torch.cat([prefix, suffix], dim=1), _at(0, 14))
    target(prefix, _at(0, 10))
    target(torch.tensor([[255, 254, 253, 252, 251, 250]]), _at(10, 6))  # a rejected draft
    logits, _ = target(suffix, _at(10, 4))  # rolled back to length 10
    torch.testing.assert_close(logits, expected[:, 10:], rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_forward_returns_the_hidden_states_asked_for(target: Transformer) -> None:
    logits, hidden = target(TOKENS, _at(0, TOKENS.shape[1]), capture=(0, 2, 4))
    assert logits.shape == (1, TOKENS.shape[1], 256)
    assert [h.shape for h in hidden] == [(1, TOKENS.shape[1], 128)] * 3
    torch.testing.assert_close(hidden[0], target.tok_embeddings(TOKENS))
    assert not torch.equal(hidden[1], hidden[2])


@torch.inference_mode()
def test_eagle3_head_fuses_three_features_and_shares_the_targets_modules(
    target: Transformer, eagle_head: Eagle3Draft
) -> None:
    assert eagle_head.fc.in_features == 3 * 128 and eagle_head.fc.out_features == 128
    assert eagle_head.layer.attention.wq.in_features == 2 * 128
    assert eagle_head.shared.tok_embeddings is target.tok_embeddings
    assert eagle_head.shared.output is target.output
    own = dict(eagle_head.named_parameters())
    assert not any(name.startswith("shared") for name in own)
    features = torch.randn(1, 5, 3 * 128)
    logits, hidden = eagle_head(TOKENS[:, :5], eagle_head.fuse(features), _at(0, 5))
    assert logits.shape == (1, 5, 256) and hidden.shape == (1, 5, 128)


def test_seeded_initialisation_is_deterministic(target: Transformer) -> None:
    again = load_target(TARGET, CPU, torch.float32)
    for (name, a), (_, b) in zip(target.named_parameters(), again.named_parameters(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@torch.inference_mode()
def test_half_precision_runs_on_cpu(dtype: torch.dtype) -> None:
    model = load_target(TARGET, CPU, dtype)
    logits, _ = model(TOKENS, _at(0, TOKENS.shape[1]))
    assert logits.dtype == dtype and torch.isfinite(logits).all()
