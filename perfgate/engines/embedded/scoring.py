"""Input logprobs: one prefill forward that scores the tokens it is given (teacher forcing).

SGLang returns them for ``/generate`` with ``return_logprob`` and ``logprob_start_len``:
perfgate's equivalence rule sends the prompt followed by the speculative output to the plain
server and reads, at every output position, the target's logprob of the given token and its
top tokens there.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from perfgate.engines.embedded.api import InputLogprobs
from perfgate.engines.embedded.model import Transformer


@torch.inference_mode()
def score_input(target: Transformer, ids: Sequence[int], start: int, top_n: int) -> InputLogprobs:
    """Score ``ids[start:]`` under ``target``, in SGLang's shape (see ``InputLogprobs``).

    The forward runs without the KV cache (causal attention within ``ids``), so it neither
    reads nor disturbs the sequences the scheduler is decoding.
    """
    device = target.output.weight.device
    tokens = torch.tensor([list(ids)], device=device)  # [1, T]
    positions = torch.arange(len(ids), device=device).unsqueeze(0)
    logits, _ = target(tokens, positions, None)  # [1, T, vocab]
    # Row i predicts token i + 1: rows start..T-2 score tokens start+1..T-1.
    logp = F.log_softmax(logits[0, start:-1].float(), dim=-1)
    chosen = logp.gather(1, tokens[0, start + 1 :].unsqueeze(1)).squeeze(1).tolist()
    top_values, top_ids = logp.topk(top_n, dim=-1) if top_n else (logp[:, :0], logp[:, :0])
    tops = [
        tuple(zip(values, (int(t) for t in ids_), strict=True))
        for values, ids_ in zip(top_values.tolist(), top_ids.tolist(), strict=True)
    ]
    return InputLogprobs(
        token_ids=tuple(int(t) for t in ids[start:]),
        logprobs=(None, *chosen),
        top=(None, *tops) if top_n else (None,) * (len(ids) - start),
    )
