"""The load a serving scenario sends: how many requests, how they arrive, how long they are.

Lengths follow ``sglang.benchmark.serving``'s random datasets (SGLang 0.5.23,
``benchmark/datasets/common.compute_random_lens``): each uniform between
``max(int(length * range_ratio), 1)`` and ``length``; ``range_ratio = 1`` makes them fixed.
Input lengths are in characters of the scenario's prompts, repeated or cut (on the embedded
engine's byte-level vocabulary a character of ASCII text is one token); output lengths are
tokens, exact, since requests ignore EOS.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.spec.serving import ServingLoad

__all__ = ["LoadRequest", "ServingLoad", "arrival_gaps_s", "build_requests"]


@dataclass(frozen=True)
class LoadRequest:
    prompt: str
    max_new_tokens: int


def build_requests(
    load: ServingLoad, prompts: Sequence[str], max_new_tokens: int
) -> list[LoadRequest]:
    """The requests of one load, in sending order: the same for every repeat and server."""
    rng = random.Random(load.seed)
    outputs = _lengths(rng, load.output_len or max_new_tokens, load.range_ratio, load.num_prompts)
    requests = []
    for i, output_len in enumerate(outputs):
        prompt = prompts[i % len(prompts)]
        if load.input_len is not None:
            (length,) = _lengths(rng, load.input_len, load.range_ratio, 1)
            prompt = (prompt * (length // len(prompt) + 1))[:length]
        requests.append(LoadRequest(prompt, output_len))
    return requests


def arrival_gaps_s(load: ServingLoad) -> list[float]:
    """Seconds to wait after sending each request (exponential at the rate; 0 when inf)."""
    if load.request_rate is None:
        return [0.0] * load.num_prompts
    rng = random.Random(load.seed + 1)
    return [rng.expovariate(load.request_rate) for _ in range(load.num_prompts)]


def _lengths(rng: random.Random, full: int, range_ratio: float, count: int) -> list[int]:
    low = max(int(full * range_ratio), 1)
    return [rng.randint(low, full) for _ in range(count)]
