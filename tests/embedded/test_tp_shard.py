"""Sharding the models for tensor parallelism, checked in one process: two shards run on two
threads whose all-reduce sums their partial outputs, against the whole model."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import torch
from torch import Tensor

from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.model import (
    Attention,
    DraftConfig,
    Eagle3Draft,
    TargetConfig,
    Transformer,
    causal_view,
    init_weights,
)
from perfgate.engines.embedded.parallel import (
    RowParallelLinear,
    TensorGroup,
    check_split,
    shard_model,
)
from perfgate.errors import ConfigError
from perfgate.probe.reader import CycleRecord, rank_cycle_ms

from .common import CPU, DRAFT, PROMPTS, TARGET

WORLD = 2


@dataclass
class _Sums:
    """What the ranks' threads share: a barrier and each rank's partial output."""

    world: int = WORLD
    barrier: threading.Barrier = field(init=False)
    parts: list[Tensor | None] = field(init=False)

    def __post_init__(self) -> None:
        self.barrier = threading.Barrier(self.world)
        self.parts = [None] * self.world


@dataclass(frozen=True)
class ThreadGroup(TensorGroup):
    sums: _Sums = field(default_factory=_Sums)

    def all_reduce(self, x: Tensor) -> Tensor:
        self.sums.parts[self.rank] = x.clone()
        self.sums.barrier.wait()
        total = sum(p for p in self.sums.parts if p is not None)
        self.sums.barrier.wait()  # every rank has read every part before the next reduce
        x.copy_(total)
        return x


def _groups(world: int = WORLD) -> list[ThreadGroup]:
    sums = _Sums(world)
    return [ThreadGroup(rank, world, None, None, sums) for rank in range(world)]


def _on_every_rank(run: Callable[[int], Tensor], world: int = WORLD) -> list[Tensor]:
    def in_inference(rank: int) -> Tensor:
        with torch.inference_mode():  # a mode per thread
            return run(rank)

    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(in_inference, range(world)))


@torch.inference_mode()
def test_two_target_shards_compute_the_whole_targets_logits() -> None:
    whole = load_target(TARGET, CPU, torch.float32)
    shards = [load_target(TARGET, CPU, torch.float32) for _ in range(WORLD)]
    for shard, group in zip(shards, _groups(), strict=True):
        shard_model(shard, group)
    tokens = torch.tensor([PROMPTS[1]])
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    view = causal_view(positions, 128)

    expected, _ = whole(tokens, positions, view)
    results = _on_every_rank(lambda rank: shards[rank](tokens, positions, view)[0])

    for logits in results:
        torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
        assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@torch.inference_mode()
def test_two_draft_head_shards_compute_the_whole_heads_output() -> None:
    target = load_target(TARGET, CPU, torch.float32)
    whole = load_draft(DRAFT, target, CPU, torch.float32)
    shards = [load_draft(DRAFT, target, CPU, torch.float32) for _ in range(WORLD)]
    for shard, group in zip(shards, _groups(), strict=True):
        shard_model(shard, group)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.tensor([PROMPTS[0]])
    hidden = torch.randn(1, tokens.shape[1], whole.config.dim, generator=generator)
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    view = causal_view(positions, 128)

    expected, _ = whole(tokens, hidden, positions, view)
    results = _on_every_rank(lambda rank: shards[rank](tokens, hidden, positions, view)[0])

    for logits in results:
        torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_eight_shards_of_a_target_and_head_split_as_the_large_ones_compute_the_whole() -> None:
    # perfgate/llama-large at --tp-size 8 gives each rank 2 of 16 heads; so does this one, at a
    # size a CPU test can afford. The ranks are threads whose all-reduce sums their parts.
    config = TargetConfig(n_layer=2, dim=128, n_head=16, ffn_dim=384, max_seq_len=256)
    draft_config = DraftConfig(dim=128, n_head=16, ffn_dim=384, feature_layers=(1, 1, 2))
    targets = [Transformer(config) for _ in range(1 + 8)]
    drafts = [Eagle3Draft(draft_config, target) for target in targets]
    for model, seed in (*((t, 0) for t in targets), *((d, 1) for d in drafts)):
        init_weights(model, seed)
        model.setup_cache(1)
    for target, draft, group in zip(targets[1:], drafts[1:], _groups(8), strict=True):
        shard_model(target, group)
        shard_model(draft, group)
    tokens = torch.tensor([PROMPTS[1]])
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    view = causal_view(positions, 128)
    hidden = torch.randn(1, tokens.shape[1], 128, generator=torch.Generator().manual_seed(0))

    expected, _ = targets[0](tokens, positions, view)
    expected_draft, _ = drafts[0](tokens, hidden, positions, view)
    results = _on_every_rank(lambda rank: targets[1 + rank](tokens, positions, view)[0], 8)
    drafted = _on_every_rank(lambda rank: drafts[1 + rank](tokens, hidden, positions, view)[0], 8)

    assert targets[1].layers[0].attention.n_head == 2
    for logits in results:
        torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
    for logits in drafted:
        torch.testing.assert_close(logits, expected_draft, rtol=1e-4, atol=1e-4)


def test_a_shard_holds_its_heads_and_their_cache_and_reduces_after_out_and_down() -> None:
    shard = load_target(TARGET, CPU, torch.float32)
    shard_model(shard, _groups()[1])
    attention = shard.layers[0].attention
    assert isinstance(attention, Attention)
    assert attention.n_head == shard.config.n_head // WORLD
    assert attention.wq.weight.shape == (shard.config.dim // WORLD, shard.config.dim)
    assert isinstance(attention.wo, RowParallelLinear)
    assert isinstance(shard.layers[0].feed_forward.w2, RowParallelLinear)
    assert attention.kv_cache is not None
    assert attention.kv_cache.k.shape[1] == shard.config.n_head // WORLD
    # Replicated: the embedding and the LM head.
    assert shard.output.weight.shape == (shard.config.vocab_size, shard.config.dim)
    with pytest.raises(RuntimeError, match="sharded already"):
        shard_model(shard, _groups()[1])


def test_a_tp_size_that_does_not_split_the_heads_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--tp-size: 3 ranks cannot split the 4 attention"):
        check_split(3, 4, 384, "--model-path")
    with pytest.raises(ConfigError, match="MLP width 6 of --speculative-draft-model-path"):
        check_split(4, 4, 6, "--speculative-draft-model-path")
    check_split(2, 4, 384, "--model-path")


def _cycle(rank: int, t: float, cycle_ms: float) -> CycleRecord:
    return CycleRecord("cycle", 100 + rank, 1, t, {"cycle": cycle_ms, "verify": 1.0}, rank=rank)


def test_the_per_rank_spread_names_the_lagging_rank() -> None:
    records = [_cycle(0, t, 10.0) for t in (1.0, 2.0, 3.0)]
    records += [_cycle(1, t, ms) for t, ms in ((1.0, 12.0), (2.0, 14.0), (3.0, 13.0))]
    records.append(_cycle(1, 9.0, 99.0))  # outside the window
    summary = rank_cycle_ms(records, 0.5, 3.5)
    assert summary == {
        "rank_cycle_ms.0": 10.0,
        "rank_cycle_ms.1": 13.0,
        "rank_cycle_ms.spread": 3.0,
    }
    assert rank_cycle_ms(records[:3], 0.5, 3.5) == {}  # one rank: no spread to show
