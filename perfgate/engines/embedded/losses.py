"""The training losses: the target's next-byte cross-entropy, and the EAGLE-3 head's
distillation from the frozen target, unrolled over its own drafts (training-time test)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from perfgate.engines.embedded.model import (
    Attention,
    AttentionView,
    Eagle3Draft,
    KVStore,
    Transformer,
)


def target_loss(model: Transformer, batch: Tensor) -> Tensor:
    """Next-byte cross-entropy of the target over a batch [B, T]."""
    logits, _ = model(batch[:, :-1], positions_of(batch[:, :-1]))
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())


class UnrollKV(KVStore):
    """Keys and values of every unrolled step so far, concatenated along the key axis."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []

    def update(self, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


# The head's attention while it trains: PyTorch's math backend, the same sums in the same order
# on every run. The unroll mask rules out flash attention, and on CUDA PyTorch then picks
# memory-efficient attention, whose backward is not deterministic: seven trainings of the large
# models on lent H200s logged the same target losses to the last digit (the target attends with
# is_causal, on flash attention) and head losses apart in the fourth, 0.48037-0.48247 at the
# end (benchmarks/results/h200-real-weights/**/training*.json), so each machine served a head of
# its own. On the math backend two trainings on two H100 machine starts wrote the same bytes
# (benchmarks/results/h100-training-repeats.md), so a baseline outlives its machine.
HEAD_ATTENTION = SDPBackend.MATH


def unroll_mask(anchors: int, step: int, device: torch.device) -> Tensor:
    """Return the mask [1, 1, anchors, (step + 1) · anchors] of unrolled step `step`.

    The query of anchor i at step k sits at position i + k, as the k-th drafted token after
    the last committed one does. It sees the step-0 entries of anchors j <= i (the positions
    drafted from true target features) and its own entries of steps 1..k (its own drafts).
    """
    causal = torch.ones(anchors, anchors, dtype=torch.bool, device=device).tril()
    own = torch.eye(anchors, dtype=torch.bool, device=device)
    return torch.cat([causal] + [own] * step, dim=1).view(1, 1, anchors, -1)


class StepResult(NamedTuple):
    loss: Tensor  # soft cross-entropy against the target, mean over valid anchors
    agreement: float  # how often the head's top token is the target's


def draft_steps(
    head: Eagle3Draft, target: Transformer, batch: Tensor, unroll: int
) -> list[StepResult]:
    """Run the head over a batch [B, T] for `unroll` training-time-test steps.

    Anchor i reads (token i + 1, target feature i) at step 0 and learns the target's
    distribution after token i + 1; step k reads (token i + 1 + k, its own step k - 1 output
    hidden) and learns the distribution after token i + 1 + k.
    """
    teacher, features = target_outputs(target, head.config.feature_layers, batch)
    anchors = batch.shape[1] - 1
    hidden = head.fuse(features[:, :anchors])
    results = []
    attentions = [m for m in head.modules() if isinstance(m, Attention)]
    caches = [attention.kv_cache for attention in attentions]  # put back after the steps
    for attention in attentions:
        attention.kv_cache = UnrollKV()
    try:
        for step in range(unroll):
            tokens, labels, valid = _shifted(batch, teacher, step, anchors)
            positions = positions_of(tokens) + step
            view = AttentionView(positions, unroll_mask(anchors, step, batch.device))
            with sdpa_kernel(HEAD_ATTENTION):
                logits, hidden = head(tokens, hidden, positions, view)
            per_token = -(labels * F.log_softmax(logits, dim=-1)).sum(-1)
            agree = (logits.argmax(-1) == labels.argmax(-1)).float()
            results.append(
                StepResult(
                    (per_token * valid).sum() / valid.sum(),
                    float((agree * valid).sum() / valid.sum()),
                )
            )
    finally:
        for attention, cache in zip(attentions, caches, strict=True):
            attention.kv_cache = cache
    return results


def draft_loss(head: Eagle3Draft, target: Transformer, batch: Tensor, unroll: int) -> Tensor:
    """The head's training loss: the mean of its unrolled steps' losses."""
    results = draft_steps(head, target, batch, unroll)
    return torch.stack([r.loss for r in results]).mean()


@torch.no_grad()
def target_outputs(
    target: Transformer, layers: Sequence[int], batch: Tensor
) -> tuple[Tensor, Tensor]:
    """Return the target's next-token distributions [B, T, V] and features [B, T, 3·dim]."""
    logits, hidden = target(batch, positions_of(batch), None, layers)
    return F.softmax(logits.float(), dim=-1), torch.cat(hidden, dim=-1)


def _shifted(
    batch: Tensor, teacher: Tensor, step: int, anchors: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Return step's tokens [B, anchors], teacher labels [B, anchors, V] and valid mask."""
    shift = 1 + step
    available = batch.shape[1] - shift  # anchors i with token i + shift inside the window
    tokens = F.pad(batch[:, shift:], (0, anchors - available))
    labels = F.pad(teacher[:, shift:], (0, 0, 0, anchors - available))
    valid = (torch.arange(anchors, device=batch.device) < available).float().expand_as(tokens)
    return tokens, labels, valid


def positions_of(batch: Tensor) -> Tensor:
    """Return the positions [B, T] of a batch of windows: 0..T-1 in every row."""
    return torch.arange(batch.shape[1], device=batch.device).expand_as(batch)
