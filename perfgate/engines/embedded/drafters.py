"""Draft models behind one interface: an EAGLE-3 head, or a standalone model drafting alone.

Both keep the first level of the next draft from their last extend, as SGLang does: "1 token
from draft prefill and (steps - 1) tokens" in the draft phase. A draft of ``num_steps`` levels
therefore runs ``num_steps - 1`` forwards, each over the ``topk`` beams of every sequence.

Positions: a sequence's target cache holds ``length`` tokens; its last committed token sits at
position ``length``, not yet in the target's cache. An EAGLE-3 head has seen the positions
below ``length`` (its input at position i is token i + 1 with the target's feature i); a
standalone model has seen the token at ``length`` too. Draft beams write to scratch slots past
what the drafter has seen, and see their own ancestors only; the next extend overwrites them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.model import (
    AttentionView,
    CachedModel,
    Eagle3Draft,
    Transformer,
    causal_view,
)
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.tree import (
    Candidates,
    DraftTree,
    build_tree,
    chain_tree,
    prefix_and_nodes_mask,
)

# (tokens [B, k], hidden [B, k, dim] or None, positions [B, k], view) -> (logits, hidden)
DraftStep = Callable[[Tensor, Tensor | None, Tensor, AttentionView], tuple[Tensor, Tensor | None]]


class DraftState(NamedTuple):
    """What an extend leaves for the next draft: its first level, and the head's hidden."""

    scores: Tensor  # [B, topk]: the draft's probabilities of its top first tokens
    tokens: Tensor  # [B, topk]
    hidden: Tensor | None  # [B, 1, dim]: an EAGLE head's output hidden at the last position


class Drafter(Protocol):
    feature_layers: tuple[int, ...]  # target hidden states the drafter reads; () for none
    model: CachedModel

    def prefill(
        self, prompts: Tensor, lengths: Tensor, first: Tensor, features: Tensor | None, kv_len: int
    ) -> None:
        """Take in the prompts [B, P] (lengths [B]) and the target's first tokens [B]."""

    def extend(
        self, tokens: Tensor, features: Tensor | None, starts: Tensor, last: Tensor, kv_len: int
    ) -> None:
        """Take in tokens [B, T] committed after position starts [B]; keep column last [B]."""

    def propose(self, root: Tensor, lengths: Tensor, params: SpecParams, kv_len: int) -> DraftTree:
        """Return a draft tree under the last committed tokens root [B]."""
        ...


def take_columns(values: Tensor, columns: Tensor) -> Tensor:
    """Return values [B, T, ...] at one column per row, columns [B]: [B, 1, ...]."""
    index = columns.view(-1, 1, *([1] * (values.dim() - 2))).expand(-1, 1, *values.shape[2:])
    return values.gather(1, index)


def first_level(logits: Tensor, hidden: Tensor | None, last: Tensor, topk: int) -> DraftState:
    """Keep the top-k next tokens and the hidden at column last [B] of an extend."""
    probs = F.softmax(take_columns(logits, last)[:, 0].float(), dim=-1)
    scores, tokens = probs.topk(topk, dim=-1)
    return DraftState(scores, tokens, None if hidden is None else take_columns(hidden, last))


class Beams(NamedTuple):
    """The paths a draft level grows from: the best topk so far, per sequence."""

    tokens: Tensor  # [B, topk]: each path's last token
    scores: Tensor  # [B, topk]: product of the draft's probabilities along the path
    hidden: Tensor | None  # [B, topk, dim]: the head's output hidden the children read
    ids: Tensor  # [B, topk]: candidate index of each path's last token
    seen: Tensor  # [B, topk, scratch] bool: the scratch slots of each path's tokens


def draft_tree(
    step: DraftStep, state: DraftState, root: Tensor, base: Tensor, params: SpecParams, kv_len: int
) -> DraftTree:
    """Grow a draft tree level by level from state; keep the best candidates under root.

    base [B] is the first slot and position past what the drafter has seen. Level s (1-based)
    of beam b sits at position base + s - 1 and in scratch slot base + (s - 1)·topk + b.
    """
    batch, topk = state.tokens.shape
    scratch = (params.num_steps - 1) * topk
    hidden = None if state.hidden is None else state.hidden.expand(-1, topk, -1)
    ids = torch.arange(topk, device=root.device).expand(batch, -1)
    seen = torch.zeros(batch, topk, scratch, dtype=torch.bool, device=root.device)
    beams = Beams(state.tokens, state.scores, hidden, ids, seen)
    levels = [Candidates(state.tokens, state.scores, torch.full_like(state.tokens, -1))]
    for level in range(1, params.num_steps):
        children, logits_hidden, seen = grow(step, beams, level, base, kv_len)
        levels.append(children)
        if level < params.num_steps - 1:
            beams = best_paths(children, logits_hidden, seen, level, topk)
    candidates = Candidates(*(torch.cat(parts, dim=1) for parts in zip(*levels, strict=True)))
    if topk == 1:  # one candidate per level: every one is kept, in a chain
        return chain_tree(root, candidates.tokens)
    return build_tree(root, candidates, params.num_draft_tokens, params.num_steps + 1)


def grow(
    step: DraftStep, beams: Beams, level: int, base: Tensor, kv_len: int
) -> tuple[Candidates, Tensor | None, Tensor]:
    """Run one draft forward over the beams; return their topk children each.

    Also returns the forward's output hidden [B, topk, dim] and what each beam has seen now.
    """
    topk, scratch = beams.seen.shape[1], beams.seen.shape[2]
    device = base.device
    own = (level - 1) * topk + torch.arange(topk, device=device)  # each beam's scratch slot
    seen = beams.seen | (own.unsqueeze(1) == torch.arange(scratch, device=device)).unsqueeze(0)
    positions = (base + level - 1).unsqueeze(1).expand(-1, topk)
    if topk == 1:  # a chain's scratch slots are its positions: plainly causal
        view = causal_view(positions, kv_len)
    else:
        view = AttentionView(base.unsqueeze(1) + own, prefix_and_nodes_mask(base, seen, kv_len))
    logits, hidden = step(beams.tokens, beams.hidden, positions, view)
    child_scores, child_tokens = F.softmax(logits.float(), dim=-1).topk(topk, dim=-1)
    scores = beams.scores.unsqueeze(2) * child_scores  # [B, topk, topk]
    parents = beams.ids.repeat_interleave(topk, dim=1)
    return Candidates(child_tokens.flatten(1), scores.flatten(1), parents), hidden, seen


def best_paths(
    children: Candidates, hidden: Tensor | None, seen: Tensor, level: int, topk: int
) -> Beams:
    """Keep the topk best children as the next level's beams, as SGLang's drafting does."""
    scores, best = children.scores.topk(topk, dim=1)
    parent = best // topk  # the beam each kept child grew from
    if hidden is not None:  # a child reads its parent's output hidden
        hidden = hidden.gather(1, parent.unsqueeze(-1).expand(-1, -1, hidden.shape[2]))
    return Beams(
        tokens=children.tokens.gather(1, best),
        scores=scores,
        hidden=hidden,
        ids=topk + (level - 1) * topk * topk + best,
        seen=seen.gather(1, parent.unsqueeze(-1).expand(-1, -1, seen.shape[2])),
    )


class Eagle3Drafter:
    """Drafts with an EAGLE-3 head: its input at position i is (token i + 1, target feature i).

    Each target feature is paired with the token that followed it, so the head predicts the
    token after next; the target's embedding of that token is what the feature lacks.
    """

    def __init__(
        self,
        head: Eagle3Draft,
        topk: int = 1,
        graphs: GraphRunner | None = None,
        feature_layers: tuple[int, ...] | None = None,
    ) -> None:
        self.head = head
        self.model: CachedModel = head
        self.topk = topk
        self.graphs = graphs or GraphRunner()
        # The target's hidden states the head reads: its own, unless a debugging override
        # feeds it others (a wiring bug, on purpose).
        self.feature_layers: tuple[int, ...] = feature_layers or head.config.feature_layers
        self.state: DraftState | None = None

    def prefill(
        self, prompts: Tensor, lengths: Tensor, first: Tensor, features: Tensor | None, kv_len: int
    ) -> None:
        """Pair features 0..n-1 of each prompt with tokens 1..n (the last is the first output)."""
        assert features is not None, "an EAGLE-3 head needs the target's features"
        tokens = F.pad(prompts[:, 1:], (0, 1)).scatter(
            1, (lengths - 1).unsqueeze(1), first[:, None]
        )
        start = torch.zeros_like(lengths)
        self.state = DraftState(*self._extend(kv_len, tokens, features, start, lengths - 1))

    def extend(
        self, tokens: Tensor, features: Tensor | None, starts: Tensor, last: Tensor, kv_len: int
    ) -> None:
        """Run the head over (tokens[:, j], features[:, j]) at positions starts + j."""
        assert features is not None, "an EAGLE-3 head needs the target's features"
        run = self.graphs.run
        site = ("extend", kv_len)
        state = run(site, partial(self._extend, kv_len), tokens, features, starts, last)
        self.state = DraftState(*state)

    def _extend(
        self, kv_len: int, tokens: Tensor, features: Tensor, starts: Tensor, last: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        positions = starts.unsqueeze(1) + torch.arange(tokens.shape[1], device=tokens.device)
        # features: [B, T, 3·dim] -> fused [B, T, dim]
        view = causal_view(positions, kv_len)
        logits, hidden = self.head(tokens, self.head.fuse(features), positions, view)
        scores, top, last_hidden = first_level(logits, hidden, last, self.topk)
        assert last_hidden is not None
        return scores, top, last_hidden

    def propose(self, root: Tensor, lengths: Tensor, params: SpecParams, kv_len: int) -> DraftTree:
        """Draft a tree; each level feeds the head its own output hidden as the feature.

        The target has not seen the draft tokens, so no true feature exists for them; EAGLE
        feeds the head's own output hidden instead (what its training-time test trains for).
        """
        assert self.state is not None, "prefill before proposing"
        scores, tokens, hidden = self.state
        assert hidden is not None

        def draft(root: Tensor, lengths: Tensor, *state: Tensor) -> DraftTree:
            return draft_tree(self._step, DraftState(*state), root, lengths, params, kv_len)

        inputs = (root, lengths, scores, tokens, hidden)
        return DraftTree(*self.graphs.run(("draft", kv_len), draft, *inputs))

    def _step(
        self, tokens: Tensor, hidden: Tensor | None, positions: Tensor, view: AttentionView
    ) -> tuple[Tensor, Tensor | None]:
        assert hidden is not None
        return cast("tuple[Tensor, Tensor | None]", self.head(tokens, hidden, positions, view))


class StandaloneDrafter:
    """Drafts with a full target-architecture model, on tokens alone."""

    feature_layers: tuple[int, ...] = ()

    def __init__(
        self, model: Transformer, topk: int = 1, graphs: GraphRunner | None = None
    ) -> None:
        self.model: CachedModel = model
        self.transformer = model
        self.topk = topk
        self.graphs = graphs or GraphRunner()
        self.state: DraftState | None = None

    def prefill(
        self, prompts: Tensor, lengths: Tensor, first: Tensor, features: Tensor | None, kv_len: int
    ) -> None:
        """Run the model over each prompt and its first token, positions 0..n."""
        tokens = F.pad(prompts, (0, 1)).scatter(1, lengths.unsqueeze(1), first[:, None])
        starts = torch.full_like(lengths, -1)
        self.state = DraftState(*self._extend(kv_len, tokens, starts, lengths), None)

    def extend(
        self, tokens: Tensor, features: Tensor | None, starts: Tensor, last: Tensor, kv_len: int
    ) -> None:
        """Run the model over the committed tokens at positions starts + 1 onwards."""
        site = ("extend", kv_len)
        scores, top = self.graphs.run(site, partial(self._extend, kv_len), tokens, starts, last)
        self.state = DraftState(scores, top, None)

    def _extend(
        self, kv_len: int, tokens: Tensor, starts: Tensor, last: Tensor
    ) -> tuple[Tensor, Tensor]:
        positions = starts.unsqueeze(1) + 1 + torch.arange(tokens.shape[1], device=tokens.device)
        logits, _ = self.transformer(tokens, positions, kv_len)  # causal
        scores, top, _ = first_level(logits, None, last, self.topk)
        return scores, top

    def propose(self, root: Tensor, lengths: Tensor, params: SpecParams, kv_len: int) -> DraftTree:
        """Draft a tree greedily; the token at length is already in the model's cache."""
        assert self.state is not None, "prefill before proposing"

        def draft(root: Tensor, lengths: Tensor, scores: Tensor, tokens: Tensor) -> DraftTree:
            state = DraftState(scores, tokens, None)
            return draft_tree(self._step, state, root, lengths + 1, params, kv_len)

        inputs = (root, lengths, self.state.scores, self.state.tokens)
        return DraftTree(*self.graphs.run(("draft", kv_len), draft, *inputs))

    def _step(
        self, tokens: Tensor, hidden: Tensor | None, positions: Tensor, view: AttentionView
    ) -> tuple[Tensor, Tensor | None]:
        logits, _ = self.transformer(tokens, positions, view)
        return logits, None
