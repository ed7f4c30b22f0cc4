"""Inference-time speed-ups that must not change what the models compute: stacked projections
(always on) and the regionally compiled layers of ``--enable-torch-compile``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.model import (
    Attention,
    FeedForward,
    Transformer,
    causal_view,
    fuse_projections,
    lay_out_down_projections,
)
from perfgate.engines.embedded.parallel import shard_model

from .common import CPU, DRAFT, TARGET, serving
from .test_tp_shard import WORLD, _groups, _on_every_rank

BATCH = 3


def _inputs(length: int, start: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(length)
    tokens = torch.randint(0, 256, (BATCH, length), generator=generator)
    positions = torch.arange(start, start + length).expand(BATCH, length)
    return tokens, positions


def _target() -> Transformer:
    model = load_target(TARGET, CPU, torch.float32)
    model.setup_cache(BATCH, 256)
    return model


def _forward(
    model: Transformer, length: int, start: int = 5, by_kv_len: bool = False
) -> torch.Tensor:
    """The logits of a forward over the causal view of 128 slots: passed as a view, or (by
    kv_len) as its slot count, built in the compiled embedding as a server's forwards do."""
    tokens, positions = _inputs(length, start)
    with torch.inference_mode():
        logits, _ = model(tokens, positions, 128 if by_kv_len else causal_view(positions, 128))
    return logits


def _caches(model: nn.Module) -> list[torch.Tensor]:
    return [m.kv_cache.k.clone() for m in model.modules() if isinstance(m, Attention)]


def test_fused_projections_compute_what_the_separate_ones_did_and_fill_the_cache_alike() -> None:
    separate = _target()
    fused = _target()
    fuse_projections(fused)

    for length, start in ((7, 0), (1, 7), (4, 8)):  # a prefill, a decode step, a verify
        torch.testing.assert_close(
            _forward(fused, length, start), _forward(separate, length, start), rtol=0, atol=1e-5
        )
    for mine, theirs in zip(_caches(fused), _caches(separate), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_fusing_stacks_the_weights_once_and_drops_the_separate_layers() -> None:
    target = _target()
    attention = target.layers[0].attention
    assert isinstance(attention, Attention)
    wq, wk, wv = (w.weight.detach().clone() for w in (attention.wq, attention.wk, attention.wv))
    fuse_projections(target)
    fuse_projections(target)  # a second call changes nothing

    assert attention.wqkv is not None
    torch.testing.assert_close(attention.wqkv.weight, torch.cat([wq, wk, wv]), rtol=0, atol=0)
    assert not hasattr(attention, "wq")
    feed_forward = target.layers[0].feed_forward
    assert isinstance(feed_forward, FeedForward) and feed_forward.w13 is not None
    assert feed_forward.w13.weight.shape == (2 * target.config.ffn_dim, target.config.dim)
    assert not hasattr(feed_forward, "w1")


def test_down_projections_go_column_major_and_back_with_the_same_values() -> None:
    """What fuse_projections does on a GPU, here on a CPU, where it keeps the trained layout."""
    target = _target()
    fuse_projections(target)
    downs = [m.w2 for m in target.modules() if isinstance(m, FeedForward)]
    assert all(isinstance(d, nn.Linear) and d.weight.is_contiguous() for d in downs)
    trained = [d.weight.detach().clone() for d in downs]
    expected = _forward(target, 1, 7)

    lay_out_down_projections(target, column_major=True)
    for down, weight in zip(downs, trained, strict=True):
        assert down.weight.stride() == (1, weight.shape[0])  # a column's N entries contiguous
        assert torch.equal(down.weight, weight)
    torch.testing.assert_close(_forward(target, 1, 7), expected, rtol=0, atol=1e-4)

    lay_out_down_projections(target, column_major=False)
    assert all(
        d.weight.is_contiguous() and torch.equal(d.weight, w)
        for d, w in zip(downs, trained, strict=True)
    )


def test_the_draft_head_fuses_its_own_layer_and_not_the_targets_shared_modules() -> None:
    target = _target()
    head = load_draft(DRAFT, target, CPU, torch.float32)
    head.setup_cache(BATCH, 256)
    features = torch.randn(
        BATCH, 4, 3 * head.config.dim, generator=torch.Generator().manual_seed(1)
    )
    tokens, positions = _inputs(4)
    with torch.inference_mode():
        hidden = head.fuse(features)
        expected = head(tokens, hidden, positions, causal_view(positions, 128))[0]
        fuse_projections(head)
        got = head(tokens, hidden, positions, causal_view(positions, 128))[0]

    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert head.layer.attention.wqkv is not None
    assert head.layer.attention.wqkv.in_features == 2 * head.config.dim
    assert target.layers[0].attention.wqkv is None  # the target fuses when its own turn comes


def test_each_rank_fuses_its_own_slices_and_the_shards_still_sum_to_the_whole() -> None:
    whole = _target()
    expected = _forward(whole, 4)
    shards = [_target() for _ in range(WORLD)]
    for shard, group in zip(shards, _groups(), strict=True):
        shard_model(shard, group)
        fuse_projections(shard)

    results = _on_every_rank(lambda rank: _forward(shards[rank], 4))

    for logits in results:
        torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_compiled_layers_compute_what_the_eager_ones_did_and_write_the_cache() -> None:
    eager = _target()
    compiled = _target()
    fuse_projections(eager)
    fuse_projections(compiled)
    assert compile_layers(compiled) == compiled.config.n_layer

    # A prefill, decode steps (one shape, then another cache length) and a verify: the
    # shapes a server meets, including a change that makes them symbolic.
    for length, start in ((7, 0), (1, 7), (1, 130), (4, 8)):
        logits = _forward(compiled, length, start, by_kv_len=True)
        torch.testing.assert_close(logits, _forward(eager, length, start), rtol=0, atol=1e-4)
        with torch.inference_mode():
            assert torch.equal(compiled.greedy(logits), logits.argmax(-1))
    for mine, theirs in zip(_caches(compiled), _caches(eager), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-4)


@pytest.mark.slow
def test_a_compiled_layer_writes_the_cache_inside_its_graph_with_no_break() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _target()
    fuse_projections(model)
    compile_layers(model)
    for length, start in ((7, 0), (1, 7)):
        _forward(model, length, start)

    # A break would split each layer around the write and run it eagerly: one more kernel and
    # launch per layer on a GPU, which the write inside the graph saves.
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] >= 1


def test_an_additive_view_attends_exactly_as_its_bool_mask_does() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 3, 16, generator=generator) for _ in range(3))
    positions = torch.tensor([[5, 6, 7], [0, 1, 2]])
    view = causal_view(positions, 24)  # 24 slots: k and v repeated 8 times
    keys, values = (t.repeat(1, 1, 8, 1) for t in (k, v))
    additive = view.additive(torch.float32)

    assert additive.mask.dtype == torch.float32
    assert torch.equal(additive.mask == 0, view.mask)
    assert additive.additive(torch.float32) is additive  # made once per forward
    expected = F.scaled_dot_product_attention(q, keys, values, attn_mask=view.mask)
    got = F.scaled_dot_product_attention(q, keys, values, attn_mask=additive.mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.slow
def test_a_server_with_enable_torch_compile_serves_speculative_decoding(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    flags = (
        *("--model-path", TARGET, "--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", DRAFT, "--speculative-num-steps", "3"),
        "--enable-torch-compile",
    )
    with serving(flags, log) as client:
        greedy = {"temperature": 0, "max_new_tokens": 24}
        body = {"text": "The quick brown fox", "sampling_params": greedy}
        response = client.post("/generate", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer["output_ids"]) == 24
    assert answer["meta_info"]["spec_accept_length"] > 1.0
    assert "layers compiled: 4 of Transformer" in log.read_text()
    assert "layers compiled: 1 of Eagle3Draft" in log.read_text()
