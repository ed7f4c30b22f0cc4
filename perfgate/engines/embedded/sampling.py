"""Sampling: SGLang's sampling parameters, and the target's choice of each next token.

Greedy decoding is the special case the gate measures (``temperature`` 0); a request that
omits ``temperature`` samples at SGLang's default of 1.0, as SGLang would. Sampling keeps the
speculative outputs exact: the target's token after every tree node is drawn from the
target's distribution there (one coin per node), and a draft is accepted when it *is* that
token, so every committed token, accepted draft or bonus, is a sample from the target given
the tokens before it. This is SGLang's target-only rule
(``tree_speculative_sampling_target_only`` with both thresholds at their default of 1.0):
one coin per level falls on a child with the target's probability of that child, and on a
rejection the bonus comes from the target's distribution without the rejected children.

Coins are drawn on the host, by the engine's generator (``--random-seed``) or a request's own
``sampling_seed``, and enter the forward as a tensor, so a CUDA graph replays them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

GREEDY_BELOW = 1e-6  # SGLang's _SAMPLING_EPS: a lower temperature decodes greedily
TOP_K_ALL = 1 << 30  # SGLang's TOP_K_ALL (sglang.api.v1.SamplingParams' default top_k)


@dataclass(frozen=True)
class Sampling:
    """One request's sampling parameters, with SGLang's defaults (0.5.23 ``SamplingParams``)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = TOP_K_ALL  # -1 means all as well
    min_p: float = 0.0
    seed: int | None = None  # sampling_seed: this request's own generator

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW or self.top_k == 1


GREEDY = Sampling(temperature=0.0)


class SamplingTensors(NamedTuple):
    """Per-row sampling parameters of a batch, on its device; greedy rows at temperature 0."""

    temperature: Tensor  # [B] float
    top_p: Tensor  # [B] float
    top_k: Tensor  # [B] long
    min_p: Tensor  # [B] float


def sampling_tensors(
    samplings: Sequence[Sampling], device: torch.device, vocab: int
) -> SamplingTensors | None:
    """Return the batch's parameters as tensors; None when every row decodes greedily."""
    if all(s.greedy for s in samplings):
        return None

    def column(values: list[float] | list[int], dtype: torch.dtype) -> Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    return SamplingTensors(
        column([0.0 if s.greedy else s.temperature for s in samplings], torch.float32),
        column([s.top_p for s in samplings], torch.float32),
        column([vocab if s.top_k < 1 else min(s.top_k, vocab) for s in samplings], torch.long),
        column([s.min_p for s in samplings], torch.float32),
    )


class Coins:
    """Uniform draws for the sampled rows of a batch: one generator per row."""

    def __init__(self, samplings: Sequence[Sampling], engine: torch.Generator) -> None:
        self.generators = [
            torch.Generator().manual_seed(s.seed) if s.seed is not None else engine
            for s in samplings
        ]

    def draw(self, columns: int, device: torch.device) -> Tensor:
        """Return [B, columns] coins in [0, 1)."""
        rows = [torch.rand(columns, generator=g) for g in self.generators]
        return torch.stack(rows).to(device)


def choose_tokens(logits: Tensor, params: SamplingTensors, coins: Tensor) -> Tensor:
    """The target's token after each position: logits [B, N, vocab], coins [B, N] -> [B, N].

    Rows at temperature 0 take the argmax. The others draw by inverse CDF from the softmax at
    their temperature, restricted as SGLang restricts it: the ``top_k`` most likely tokens,
    the smallest set whose probability reaches ``top_p``, and tokens at least ``min_p`` times
    as likely as the most likely one.
    """
    greedy = logits.argmax(dim=-1)
    temperature = params.temperature.clamp_min(GREEDY_BELOW)[:, None, None]
    probs = F.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1], device=probs.device)
    keep = (
        (ranks < params.top_k[:, None, None])
        & ((sorted_probs.cumsum(-1) - sorted_probs) < params.top_p[:, None, None])
        & (sorted_probs >= params.min_p[:, None, None] * sorted_probs[..., :1])
    )
    cdf = (sorted_probs * keep).cumsum(-1)
    below = (cdf <= coins.unsqueeze(-1) * cdf[..., -1:]).sum(-1, keepdim=True)
    sampled = order.gather(-1, below.clamp_max(probs.shape[-1] - 1)).squeeze(-1)
    return torch.where(params.temperature[:, None] < GREEDY_BELOW, greedy, sampled)
