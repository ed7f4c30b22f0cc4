"""The models: a KV cache written by slot and read through a mask, EAGLE-3 features."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perfgate.engines.embedded.loading import MODELS_DIR, load_target
from perfgate.engines.embedded.model import (
    AttentionView,
    Eagle3Draft,
    Transformer,
    causal_view,
    kv_bucket,
)

from .common import CPU, TARGET

TOKENS = torch.tensor([list(b"speculative decoding, cached")])
KV_LEN = 128


def _at(start: int, count: int) -> torch.Tensor:
    return torch.arange(start, start + count).unsqueeze(0)


def _forward(model: Transformer, tokens: torch.Tensor, start: int) -> torch.Tensor:
    positions = _at(start, tokens.shape[1])
    return model(tokens, positions, causal_view(positions, KV_LEN))[0]


@torch.inference_mode()
def test_incremental_decoding_matches_one_full_forward(target: Transformer) -> None:
    full = _forward(target, TOKENS, 0)
    _forward(target, TOKENS[:, :8], 0)
    steps = [_forward(target, TOKENS[:, i : i + 1], i) for i in range(8, TOKENS.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 8:], rtol=1e-4, atol=1e-4)


def test_a_kv_len_in_place_of_a_view_is_the_causal_view_over_that_many_slots() -> None:
    by_int, by_view = (load_target(TARGET, CPU, torch.float32) for _ in range(2))
    for model in (by_int, by_view):
        model.setup_cache(1, 256)
    positions = _at(3, TOKENS.shape[1])
    with torch.inference_mode():
        assert torch.equal(
            by_int(TOKENS, positions, KV_LEN)[0],
            by_view(TOKENS, positions, causal_view(positions, KV_LEN))[0],
        )
    caches = [
        [m.kv_cache.k for m in model.modules() if hasattr(m, "kv_cache")]
        for model in (by_int, by_view)
    ]
    assert caches[0] and all(torch.equal(a, b) for a, b in zip(*caches, strict=True))


@torch.inference_mode()
def test_cached_forward_matches_training_forward(target: Transformer) -> None:
    uncached, _ = target(TOKENS, _at(0, TOKENS.shape[1]))  # no view: causal within the input
    for attention in (m for m in target.modules() if hasattr(m, "kv_cache")):
        assert attention.kv_cache is not None
    torch.testing.assert_close(_forward(target, TOKENS, 0), uncached, rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_stale_cache_entries_are_overwritten_before_they_are_seen(target: Transformer) -> None:
    prefix, suffix = TOKENS[:, :10], TOKENS[:, 10:14]
    expected = _forward(target, torch.cat([prefix, suffix], dim=1), 0)
    _forward(target, prefix, 0)
    _forward(target, torch.tensor([[255, 254, 253, 252, 251, 250]]), 10)  # a rejected draft
    logits = _forward(target, suffix, 10)  # rolled back to length 10
    torch.testing.assert_close(logits, expected[:, 10:], rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_entries_moved_between_slots_read_as_written_in_place(target: Transformer) -> None:
    """What KV compaction relies on: entries written at scratch slots, then moved home."""
    prefix, suffix = TOKENS[:, :10], TOKENS[:, 10:13]
    expected = _forward(target, TOKENS[:, :14], 0)
    _forward(target, prefix, 0)
    # Write the 3 suffix tokens at slots 20..22 with positions 10..12, seeing the prefix.
    slots, positions = _at(20, 3), _at(10, 3)
    keys = torch.arange(KV_LEN)
    mask = (keys < 10) | ((keys >= 20) & (keys <= slots.view(-1, 1)))
    target(suffix, positions, AttentionView(slots, mask.view(1, 1, 3, KV_LEN)))
    target.copy_slots(_at(20, 3), _at(10, 3))
    logits = _forward(target, TOKENS[:, 13:14], 13)
    torch.testing.assert_close(logits, expected[:, 13:], rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_forward_returns_the_hidden_states_asked_for(target: Transformer) -> None:
    positions = _at(0, TOKENS.shape[1])
    logits, hidden = target(TOKENS, positions, causal_view(positions, KV_LEN), capture=(0, 2, 4))
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
    positions = _at(0, 5)
    view = causal_view(positions, KV_LEN)
    logits, hidden = eagle_head(TOKENS[:, :5], eagle_head.fuse(features), positions, view)
    assert logits.shape == (1, 5, 256) and hidden.shape == (1, 5, 128)


def test_caches_grow_on_demand_and_say_so(target: Transformer) -> None:
    model = load_target(TARGET, CPU, torch.float32)
    assert model.cache_shape() == (1, 2048)
    assert not model.ensure_cache(1, 256)
    assert model.ensure_cache(3, 256) and model.cache_shape() == (3, 2048)
    assert (
        kv_bucket(1, 2048) == 128 and kv_bucket(129, 2048) == 256 and kv_bucket(4000, 2048) == 2048
    )


def test_seeded_initialisation_is_deterministic(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes((MODELS_DIR / "llama-tiny" / "config.json").read_bytes())
    again = [load_target(str(tmp_path), CPU, torch.float32) for _ in range(2)]
    for (name, a), (_, b) in zip(
        again[0].named_parameters(), again[1].named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@torch.inference_mode()
def test_half_precision_runs_on_cpu(dtype: torch.dtype) -> None:
    model = load_target(TARGET, CPU, dtype)
    positions = _at(0, TOKENS.shape[1])
    logits, _ = model(TOKENS, positions, causal_view(positions, KV_LEN))
    assert logits.dtype == dtype and torch.isfinite(logits).all()
