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
from perfgate.engines.embedded.model import Attention, causal_view
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

    barrier: threading.Barrier = field(default_factory=lambda: threading.Barrier(WORLD))
    parts: list[Tensor | None] = field(default_factory=lambda: [None] * WORLD)


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


def _groups() -> list[ThreadGroup]:
    sums = _Sums()
    return [ThreadGroup(rank, WORLD, None, None, sums) for rank in range(WORLD)]


def _on_every_rank(run: Callable[[int], Tensor]) -> list[Tensor]:
    def in_inference(rank: int) -> Tensor:
        with torch.inference_mode():  # a mode per thread
            return run(rank)

    with ThreadPoolExecutor(WORLD) as pool:
        return list(pool.map(in_inference, range(WORLD)))


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
