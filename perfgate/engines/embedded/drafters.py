"""Draft models behind one interface: an EAGLE-3 head, or a standalone model drafting greedily.

Both keep the first draft token of the next cycle from their last extend, as SGLang does: "1
token from draft prefill and (steps - 1) tokens" in the draft phase.

Positions: the target's cursor ``length`` is the position of the last committed token, the one
the target has not seen yet. A drafter's KV cache is rolled back like the target's, by writing
over stale positions (see ``model.py``).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from perfgate.engines.embedded.model import Eagle3Draft, Transformer


class Drafter(Protocol):
    feature_layers: tuple[int, ...]  # target hidden states the drafter reads; () for none
    max_seq_len: int

    def prefill(self, prompt: Tensor, first_token: Tensor, features: Tensor | None) -> None:
        """Take in the prompt [1, n] and the target's first token [1]."""

    def propose(self, length: int, num_steps: int) -> Tensor:
        """Return num_steps draft tokens [num_steps] to follow the token at position length."""
        ...

    def extend(self, tokens: Tensor, features: Tensor | None, start: int) -> None:
        """Take in the tokens [k] committed after the token at position start."""


def positions(start: int, count: int, device: torch.device) -> Tensor:
    """Return the positions [count] from start, made on device (no host-to-device copy)."""
    return torch.arange(start, start + count, device=device)


def greedy(logits: Tensor) -> Tensor:
    """Return the argmax token of each row of logits [..., vocab]."""
    return logits.argmax(dim=-1)


class Eagle3Drafter:
    """Drafts with an EAGLE-3 head: its input at position i is (token i + 1, target feature i).

    Each target feature is paired with the token that followed it, so the head predicts the
    token after next; the target's embedding of that token is what the feature lacks.
    """

    def __init__(self, head: Eagle3Draft) -> None:
        self.head = head
        self.feature_layers: tuple[int, ...] = head.config.feature_layers
        self.max_seq_len = head.max_seq_len
        self.device = head.fc.weight.device
        self._next = torch.zeros(1, dtype=torch.long, device=self.device)  # [1]
        self._hidden = torch.zeros(1, 1, head.config.dim, device=self.device)  # [1, 1, dim]

    def prefill(self, prompt: Tensor, first_token: Tensor, features: Tensor | None) -> None:
        """Pair features 0..n-1 of the prompt with tokens 1..n (the last is the first output)."""
        tokens = torch.cat([prompt[0, 1:], first_token])
        self.extend(tokens, features, start=0)

    def extend(self, tokens: Tensor, features: Tensor | None, start: int) -> None:
        """Run the head over (tokens[j], features[j]) at positions start + j."""
        assert features is not None, "an EAGLE-3 head needs the target's features"
        # features: [1, k, 3·dim] -> fused [1, k, dim]
        hidden_in = self.head.fuse(features)
        count = tokens.shape[0]
        logits, hidden = self.head(
            tokens.view(1, -1), hidden_in, positions(start, count, self.device)
        )
        self._next = greedy(logits[0, -1:])
        self._hidden = hidden[:, -1:]

    def propose(self, length: int, num_steps: int) -> Tensor:
        """Chain-draft: each step feeds the head's own output hidden back as its feature."""
        # The target has not seen the draft tokens, so no true feature exists for them; EAGLE
        # feeds the head's own output hidden instead. The first token comes from the extend.
        tokens, hidden = [self._next], self._hidden
        for step in range(1, num_steps):
            position = positions(length + step - 1, 1, self.device)
            logits, hidden = self.head(tokens[-1].view(1, 1), hidden, position)
            tokens.append(greedy(logits[0, -1:]))
        return torch.cat(tokens)


class StandaloneDrafter:
    """Drafts with a full target-architecture model, one greedy token per forward."""

    feature_layers: tuple[int, ...] = ()

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.max_seq_len = model.max_seq_len
        self.device = model.output.weight.device
        self._next = torch.zeros(1, dtype=torch.long, device=self.device)  # [1]

    def prefill(self, prompt: Tensor, first_token: Tensor, features: Tensor | None) -> None:
        """Run the model over the prompt and the first token, positions 0..n."""
        self._forward(torch.cat([prompt[0], first_token]), start=0)

    def extend(self, tokens: Tensor, features: Tensor | None, start: int) -> None:
        """Run the model over the committed tokens at positions start + 1 onwards."""
        self._forward(tokens, start=start + 1)

    def propose(self, length: int, num_steps: int) -> Tensor:
        """Chain-draft greedily; the token at length is already in the model's cache."""
        tokens = [self._next]
        for step in range(1, num_steps):
            position = positions(length + step, 1, self.device)
            logits, _ = self.model(tokens[-1].view(1, 1), position)
            tokens.append(greedy(logits[0, -1:]))
        return torch.cat(tokens)

    def _forward(self, tokens: Tensor, start: int) -> None:
        count = tokens.shape[0]
        logits, _ = self.model(tokens.view(1, -1), positions(start, count, self.device))
        self._next = greedy(logits[0, -1:])
