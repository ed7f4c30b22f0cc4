"""Requests, their results, and the state of a batch of sequences decoding together.

The device holds what the forwards read (each sequence's last token and length); the host
holds what the loop decides with (lengths, remaining tokens, outputs). They meet once per step:
``Batch.commit`` copies the step's tokens to the host in one transfer. Split in two
(``start_commit``, then ``finish_commit``), the copy starts without waiting, so that the GPU
has the next work queued while the host waits for it and keeps the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from perfgate.engines.embedded.model import BYTE_VOCAB, kv_bucket
from perfgate.engines.embedded.sampling import (
    GREEDY,
    Coins,
    Sampling,
    SamplingTensors,
    sampling_tensors,
)

TopLogprobs = tuple[tuple[float, int], ...]  # (logprob, token id), most likely first


class RequestError(ValueError):
    """A request this engine cannot serve; the server answers it with HTTP 400."""


@dataclass(frozen=True)
class Request:
    prompt_ids: Sequence[int]
    max_new_tokens: int
    top_logprobs_num: int | None = None  # None: no logprobs; 0: each output token's only
    sampling: Sampling = GREEDY


@dataclass(frozen=True)
class Generation:
    output_ids: list[int]
    spec_verify_ct: int = 0  # verify passes while the sequence was decoding; 0 when plain
    correct_drafts: tuple[int, ...] = ()  # per verify pass: draft tokens accepted, bonus excluded
    output_logprobs: tuple[float, ...] | None = None  # per output token, under the target
    output_top_logprobs: tuple[TopLogprobs, ...] | None = None  # per output position

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def accept_tokens(self) -> int:
        """Tokens the verify passes produced: correct drafts plus one bonus token each."""
        return sum(self.correct_drafts) + len(self.correct_drafts)


def check_request(request: Request, max_seq_len: int, lookahead: int) -> None:
    """Raise RequestError unless the prompt and its generation fit the model."""
    prompt, max_new_tokens = request.prompt_ids, request.max_new_tokens
    if not prompt:
        raise RequestError("the prompt is empty; send at least one token")
    if any(not 0 <= t < BYTE_VOCAB for t in prompt):
        raise RequestError("input_ids must be byte values in 0..255 (byte-level vocabulary)")
    if max_new_tokens < 0:
        raise RequestError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    top = request.top_logprobs_num
    if top is not None and not 0 <= top <= BYTE_VOCAB:
        raise RequestError(f"top_logprobs_num must be in 0..{BYTE_VOCAB}, got {top}")
    if len(prompt) + max_new_tokens + lookahead > max_seq_len:
        raise RequestError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) + draft "
            f"lookahead ({lookahead}) exceed the model's context of {max_seq_len} tokens"
        )


class Committing(NamedTuple):
    """A step's results on their way to the host (``Batch.start_commit``)."""

    values: Tensor  # [B, 1 + K]: each sequence's count, then its tokens; on the host once ready
    logprobs: tuple[Tensor, ...] | None  # chosen, top values, top ids, where logprobs are asked
    ready: torch.cuda.Event | None  # passed once the copies are done; None where no GPU
    verify: bool  # a verify pass: each decoding sequence counts one


class Batch:
    """Sequences decoding together, each at its own length, each with its own budget."""

    def __init__(
        self,
        requests: Sequence[Request],
        device: torch.device,
        max_seq_len: int,
        generator: torch.Generator | None = None,
    ):
        self.requests = list(requests)
        self.device = device
        self.max_seq_len = max_seq_len
        prompt_lengths = [len(r.prompt_ids) for r in requests]
        # The last token of each sequence sits at position `length`, not yet in the target's
        # cache, which holds positions 0..length-1. Before prefill, that is the prompt's last
        # token; the prefill takes in the whole prompt and commits the first output token.
        self.tokens = torch.zeros(len(requests), dtype=torch.long, device=device)
        self.host_lengths = [n - 1 for n in prompt_lengths]
        self.lengths = torch.tensor(self.host_lengths, device=device)
        self.remaining = [r.max_new_tokens for r in requests]
        self.active = torch.tensor([n > 0 for n in self.remaining], device=device)
        self.outputs: list[list[int]] = [[] for _ in requests]
        self.verify_ct = [0] * len(requests)
        self.correct: list[list[int]] = [[] for _ in requests]
        # The last verify pass: the rows that were decoding, and the drafts each accepted.
        self.verified: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        self.logprobs: list[list[float]] = [[] for _ in requests]
        self.top_logprobs: list[list[TopLogprobs]] = [[] for _ in requests]
        self.top_n = max((r.top_logprobs_num or 0) for r in requests)
        self.wants_logprobs = any(r.top_logprobs_num is not None for r in requests)
        self.final_slots = max(
            p + r.max_new_tokens for p, r in zip(prompt_lengths, requests, strict=True)
        )
        samplings = [r.sampling for r in requests]
        # None when every row decodes greedily: the forwards then take the argmax, as before.
        self.sampling: SamplingTensors | None = sampling_tensors(samplings, device, BYTE_VOCAB)
        self.coins = Coins(samplings, generator or torch.Generator()) if self.sampling else None

    def draw_coins(self, columns: int) -> Tensor:
        """Return [B, columns] uniform draws for the sampled rows (a batch that samples)."""
        assert self.coins is not None, "a greedy batch draws no coins"
        return self.coins.draw(columns, self.device)

    @property
    def done(self) -> bool:
        return not any(self.remaining)

    def kv_len(self, lookahead: int, final: bool = False, ahead: int = 0) -> int:
        """Return the cache slots a step reads: past every slot it may write, bucketed.

        final: the most any step of this batch reads, to size the caches once. ahead: how far
        the device's lengths may stand past the host's (a commit not finished yet).
        """
        most = kv_bucket(self.final_slots + lookahead, self.max_seq_len)
        if final:
            return most
        reach = max(self.host_lengths) + ahead + lookahead
        return min(most, kv_bucket(reach, self.max_seq_len))

    def commit(
        self,
        tokens: Tensor,
        counts: Tensor,
        logits: Tensor,
        num_correct: Tensor | None = None,
    ) -> int:
        """Commit counts [B] of tokens [B, K] per sequence; return how many reached outputs.

        logits [B, K, vocab] are the target's distributions of those tokens (for logprobs);
        num_correct [B] marks a verify pass: each decoding sequence counts one.
        """
        return self.finish_commit(self.start_commit(tokens, counts, logits, num_correct))

    def start_commit(
        self,
        tokens: Tensor,
        counts: Tensor,
        logits: Tensor,
        num_correct: Tensor | None = None,
    ) -> Committing:
        """Commit on the device, and start the host's copy of the tokens without waiting.

        Until ``finish_commit``, the device state (tokens, lengths) is the new one and the
        host's (outputs, host_lengths, remaining) the old one: work queued in between runs on
        the GPU while the host waits for the copy.
        """
        last = tokens.gather(1, (counts - 1).unsqueeze(1)).squeeze(1)
        self.tokens = torch.where(self.active, last, self.tokens)
        self.lengths = self.lengths + counts * self.active  # a new tensor: callers keep the old
        values = torch.cat([counts.unsqueeze(1), tokens], dim=1)
        logprobs = self._logprobs(tokens, logits) if self.wants_logprobs else None
        if self.device.type != "cuda":
            return Committing(values, logprobs, None, num_correct is not None)
        copies = tuple(t.to("cpu", non_blocking=True) for t in (values, *(logprobs or ())))
        ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
        ready.record()
        return Committing(copies[0], copies[1:] or None, ready, num_correct is not None)

    def finish_commit(self, committing: Committing) -> int:
        """Wait for the copy ``start_commit`` began (the step's one sync); keep what each
        sequence produced. Return how many tokens reached outputs."""
        if committing.ready is not None:
            committing.ready.synchronize()
        host = committing.values.tolist()
        logprobs = None
        if committing.logprobs is not None:
            chosen, top_values, top_ids = committing.logprobs
            logprobs = (chosen.tolist(), top_values.tolist(), top_ids.tolist())
        committed = 0
        rows, drafts = [], []
        for row, (count, *row_tokens) in enumerate(host):
            if not self.remaining[row]:
                continue  # finished earlier: frozen
            take = min(count, self.remaining[row])
            self.outputs[row].extend(row_tokens[:take])
            self.remaining[row] -= take
            self.host_lengths[row] += count
            committed += take
            if committing.verify:
                self.verify_ct[row] += 1
                self.correct[row].append(count - 1)
                rows.append(row)
                drafts.append(count - 1)
            if logprobs is not None:
                self._keep_logprobs(row, take, logprobs)
        if committing.verify:
            self.verified = (tuple(rows), tuple(drafts))
        if not all(self.remaining):
            self.active = torch.tensor([n > 0 for n in self.remaining], device=self.device)
        return committed

    def ends_with_next_commit(self) -> bool:
        """Whether every sequence is sure to finish in the next commit (each active sequence
        commits one token at least), known before its tokens reach the host."""
        return max(self.remaining) <= 1

    def _logprobs(self, tokens: Tensor, logits: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logp = F.log_softmax(logits.float(), dim=-1)  # [B, K, vocab]
        chosen = logp.gather(2, tokens.unsqueeze(-1)).squeeze(-1)  # [B, K]
        top_values, top_ids = logp.topk(self.top_n, dim=-1)  # [B, K, top_n]
        return chosen, top_values, top_ids

    def _keep_logprobs(
        self, row: int, take: int, logprobs: tuple[list[Any], list[Any], list[Any]]
    ) -> None:
        chosen, top_values, top_ids = logprobs
        self.logprobs[row].extend(chosen[row][:take])
        top = self.requests[row].top_logprobs_num or 0
        for values, ids in zip(top_values[row][:take], top_ids[row][:take], strict=True):
            self.top_logprobs[row].append(tuple(zip(values[:top], ids[:top], strict=True)))

    def generation(self, row: int) -> Generation:
        """Return one sequence's result (final once its remaining budget is 0)."""
        wants = self.requests[row].top_logprobs_num is not None
        return Generation(
            list(self.outputs[row]),
            self.verify_ct[row],
            tuple(self.correct[row]),
            tuple(self.logprobs[row]) if wants else None,
            tuple(self.top_logprobs[row]) if wants else None,
        )

    def generations(self) -> list[Generation]:
        """Return each sequence's result."""
        return [self.generation(row) for row in range(len(self.requests))]
