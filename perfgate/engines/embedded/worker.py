"""The decoding loops: plain greedy decoding and EAGLE-style chain speculation.

Plain functions and classes that take the models. One sequence at a time, greedy only; the
byte vocabulary has no EOS, so generation runs to ``max_new_tokens`` exactly.

The probe times these methods by name (``perfgate/probe/targets.py``): keep every bit of a
phase's work inside its method, and ``EagleWorker.cycle`` around exactly one cycle.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from perfgate.engines.embedded.drafters import Drafter, greedy, positions
from perfgate.engines.embedded.model import Transformer
from perfgate.errors import ConfigError

# SGLang's automatic choice for most model families; its Llama choice (5, 4, 8) drafts a tree.
AUTO_NUM_STEPS, AUTO_TOPK, AUTO_NUM_DRAFT_TOKENS = 3, 1, 4


class RequestError(ValueError):
    """A request this engine cannot serve; the server answers it with HTTP 400."""


@dataclass(frozen=True)
class SpecParams:
    num_steps: int  # draft tokens per cycle
    topk: int
    num_draft_tokens: int  # tokens per verify pass: num_steps + 1 for a chain


@dataclass(frozen=True)
class Generation:
    output_ids: list[int]
    spec_verify_ct: int = 0  # verify passes; 0 for plain decoding
    correct_drafts: tuple[int, ...] = ()  # per verify pass: draft tokens accepted, bonus excluded

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def accept_tokens(self) -> int:
        """Tokens the verify passes produced: correct drafts plus one bonus token each."""
        return sum(self.correct_drafts) + len(self.correct_drafts)


def resolve_spec_params(
    num_steps: int | None, topk: int | None, num_draft_tokens: int | None
) -> SpecParams:
    """Apply SGLang's rules for chain drafting; raise ConfigError naming the flags to fix."""
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            raise ConfigError(
                "--speculative-eagle-topk and --speculative-num-draft-tokens need "
                "--speculative-num-steps too",
                fix="set all three, e.g. --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4",
            )
        return SpecParams(AUTO_NUM_STEPS, AUTO_TOPK, AUTO_NUM_DRAFT_TOKENS)
    topk = 1 if topk is None else topk
    num_draft_tokens = num_steps + 1 if num_draft_tokens is None else num_draft_tokens
    if num_steps < 1:
        raise ConfigError(f"must be at least 1, got {num_steps}", field="--speculative-num-steps")
    if topk != 1:
        raise ConfigError(
            f"{topk}: tree drafting (topk > 1) is not supported yet by the embedded engine",
            field="--speculative-eagle-topk",
            fix="use --speculative-eagle-topk 1",
        )
    if num_draft_tokens != num_steps + 1:
        raise ConfigError(
            f"{num_draft_tokens} with --speculative-num-steps {num_steps}: with "
            "--speculative-eagle-topk 1 a chain verifies num_steps + 1 tokens (SGLang warns and "
            f"resets it to {num_steps + 1})",
            field="--speculative-num-draft-tokens",
            fix=f"pass --speculative-num-draft-tokens {num_steps + 1}",
        )
    return SpecParams(num_steps, topk, num_draft_tokens)


def check_request(
    prompt_ids: Sequence[int], max_new_tokens: int, max_seq_len: int, lookahead: int
) -> None:
    """Raise RequestError unless the prompt and its generation fit the model."""
    if not prompt_ids:
        raise RequestError("the prompt is empty; send at least one token")
    if any(not 0 <= t < 256 for t in prompt_ids):
        raise RequestError("input_ids must be byte values in 0..255 (byte-level vocabulary)")
    if max_new_tokens < 0:
        raise RequestError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if len(prompt_ids) + max_new_tokens + lookahead > max_seq_len:
        raise RequestError(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) + draft "
            f"lookahead ({lookahead}) exceed the model's context of {max_seq_len} tokens"
        )


class PlainWorker:
    """Greedy decoding, one target forward per token."""

    def __init__(self, target: Transformer) -> None:
        self.target = target
        self.device = target.output.weight.device

    def prefill(self, prompt: Tensor) -> Tensor:
        """Run the target over the prompt [1, n]; return the first token [1]."""
        logits, _ = self.target(prompt, positions(0, prompt.shape[1], self.device))
        return greedy(logits[0, -1:])

    def decode_step(self, token: Tensor, position: int) -> Tensor:
        """Feed token [1] at position; return the next token [1]."""
        logits, _ = self.target(token.view(1, 1), positions(position, 1, self.device))
        return greedy(logits[0, -1:])

    def check(self, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        """Raise RequestError unless this request fits the model."""
        check_request(prompt_ids, max_new_tokens, self.target.max_seq_len, lookahead=0)

    @torch.inference_mode()
    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> Generation:
        """Decode max_new_tokens tokens after prompt_ids."""
        self.check(prompt_ids, max_new_tokens)
        if max_new_tokens == 0:
            return Generation([])
        prompt = torch.tensor([list(prompt_ids)], device=self.device)
        tokens = [self.prefill(prompt)]
        for position in range(len(prompt_ids), len(prompt_ids) + max_new_tokens - 1):
            tokens.append(self.decode_step(tokens[-1], position))
        return Generation(torch.cat(tokens).tolist())


@dataclass
class SeqState:
    """One sequence being decoded speculatively."""

    last_token: Tensor  # [1]: committed, at position `length`, not yet in the target's cache
    length: int  # the target's KV cache is valid for positions 0..length-1
    remaining: int  # tokens still to commit
    output: list[Tensor] = field(default_factory=list)
    correct_drafts: list[int] = field(default_factory=list)


class Acceptance(NamedTuple):
    tokens: Tensor  # [num_correct + 1]: the accepted drafts, then the bonus token
    num_correct: int
    start: int  # position of the cycle's first verified token (the last committed one)
    committed: int  # tokens added to the output: num_correct + 1, or fewer in the last cycle


class VerifyDelay:
    """Makes verify take a fixed time longer: a sleep on CPU, a calibrated spin on CUDA."""

    def __init__(self, delay_ms: float, device: torch.device) -> None:
        self.delay_ms = delay_ms
        self.cuda_cycles = 0
        if delay_ms > 0 and device.type == "cuda":
            self.cuda_cycles = round(delay_ms * cuda_sleep_cycles_per_ms(device))

    def __call__(self) -> None:
        if self.cuda_cycles:
            torch.cuda._sleep(self.cuda_cycles)  # on the current stream, where the probe looks
        elif self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000)


def cuda_sleep_cycles_per_ms(device: torch.device, cycles: int = 10_000_000) -> float:
    """Time torch.cuda._sleep on device; return the spin cycles that take one millisecond."""
    with torch.cuda.device(device):
        torch.cuda._sleep(cycles // 100)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / start.elapsed_time(end)


class EagleWorker:
    """Chain speculation: draft num_steps tokens, verify them in one target forward, accept."""

    def __init__(
        self,
        target: Transformer,
        drafter: Drafter,
        params: SpecParams,
        verify_delay_ms: float = 0.0,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.params = params
        self.device = target.output.weight.device
        self.verify_delay = VerifyDelay(verify_delay_ms, self.device)

    def prefill(self, prompt: Tensor) -> Tensor:
        """Run the target over the prompt [1, n], then the drafter; return the first token [1]."""
        count = prompt.shape[1]
        capture = self.drafter.feature_layers
        logits, hidden = self.target(prompt, positions(0, count, self.device), capture)
        first = greedy(logits[0, -1:])
        self.drafter.prefill(prompt, first, _features(hidden))
        return first

    def cycle(self, seq: SeqState) -> int:
        """Run one decode cycle; return the number of tokens committed."""
        drafts = self.draft(seq)
        targets, features = self.verify(seq, drafts)
        accepted = self.accept(seq, drafts, targets)
        if seq.remaining > 0:  # like SGLang, no draft extend for a finished request
            self.draft_extend(accepted, features)
        return accepted.committed

    def draft(self, seq: SeqState) -> Tensor:
        """Propose num_steps draft tokens [num_steps] after the last committed token."""
        return self.drafter.propose(seq.length, self.params.num_steps)

    def verify(self, seq: SeqState, drafts: Tensor) -> tuple[Tensor, Tensor | None]:
        """Run ONE target forward over [last token, d1..dS]; return its greedy tokens [S + 1].

        targets[k] is the target's token after d_k (after the last token for k = 0); the
        features [1, S + 1, 3·dim] are returned for the drafter's extend.
        """
        tokens = torch.cat([seq.last_token, drafts]).view(1, -1)
        where = positions(seq.length, tokens.shape[1], self.device)
        # logits: [1, num_steps + 1, vocab]
        logits, hidden = self.target(tokens, where, self.drafter.feature_layers)
        self.verify_delay()
        return greedy(logits[0]), _features(hidden)

    def accept(self, seq: SeqState, drafts: Tensor, targets: Tensor) -> Acceptance:
        """Keep the longest prefix of drafts the target agrees with, plus its bonus token."""
        # d_k is correct when it equals the target's choice after d_(k-1); the first miss ends
        # acceptance, since every later draft was conditioned on a wrong token.
        matches = (drafts == targets[:-1]).int()
        num_correct = int(matches.cumprod(dim=0).sum().item())  # host sync: positions need it
        # targets[:num_correct] equal the accepted drafts, and targets[num_correct] is the bonus:
        # the target's own next token, so every verify pass yields at least one token.
        tokens = targets[: num_correct + 1]
        start = seq.length
        # Roll back: the target's cache is valid through the last token and the correct drafts;
        # the entries after them are stale and get overwritten before any query can see them.
        seq.length = start + num_correct + 1
        seq.last_token = tokens[-1:]
        committed = min(num_correct + 1, seq.remaining)  # the last cycle may stop short
        seq.output.append(tokens[:committed])
        seq.remaining -= committed
        seq.correct_drafts.append(num_correct)
        return Acceptance(tokens, num_correct, start, committed)

    def draft_extend(self, accepted: Acceptance, features: Tensor | None) -> None:
        """Run the drafter over the accepted tokens with the target's true features."""
        count = accepted.num_correct + 1
        true_features = None if features is None else features[:, :count]
        self.drafter.extend(accepted.tokens, true_features, accepted.start)

    def check(self, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        """Raise RequestError unless this request, drafts included, fits the models."""
        lookahead = self.params.num_steps + 1
        max_seq_len = min(self.target.max_seq_len, self.drafter.max_seq_len)
        check_request(prompt_ids, max_new_tokens, max_seq_len, lookahead)

    @torch.inference_mode()
    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int) -> Generation:
        """Decode max_new_tokens tokens after prompt_ids, num_steps + 1 at most per cycle."""
        self.check(prompt_ids, max_new_tokens)
        if max_new_tokens == 0:
            return Generation([])
        prompt = torch.tensor([list(prompt_ids)], device=self.device)
        first = self.prefill(prompt)
        seq = SeqState(first, len(prompt_ids), max_new_tokens - 1, output=[first])
        while seq.remaining > 0:
            self.cycle(seq)
        output_ids = torch.cat(seq.output).tolist()
        return Generation(output_ids, len(seq.correct_drafts), tuple(seq.correct_drafts))


def _features(hidden: list[Tensor]) -> Tensor | None:
    """Concatenate captured hidden states into EAGLE-3 features [B, T, 3·dim]; None if none."""
    return torch.cat(hidden, dim=-1) if hidden else None
