"""Quality measures of the embedded models: varied greedy text, and how often drafts are right.

Functions over token ids and generations, the prompt sets they are measured on, and the
measurement of a trained pair of models that ``train.py`` records beside the weights.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import product
from typing import Any

from perfgate.engines.embedded.api import decode_text
from perfgate.engines.embedded.batch import Generation, Request
from perfgate.engines.embedded.drafters import Eagle3Drafter
from perfgate.engines.embedded.model import Eagle3Draft, Transformer
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker
from perfgate.prompts import load_prompt_set

# 64 docstring-like prompts: 8 openings x 8 continuations, none of them the default set's.
OPENINGS = ("Return", "Raise", "Create", "Convert", "If", "This", "The", "Iterate over")
CONTINUATIONS = (
    "the number of",
    "a new",
    "the given",
    "an error if",
    "the path to",
    "the value of",
    "a list of",
    "the name of",
)


def distinct_ngram_ratio(ids: Sequence[int], n: int = 8) -> float:
    """Return the share of distinct n-grams among the n-grams of ids.

    1.0 means no n-gram repeats (varied text); a loop of period p over L tokens scores about
    p / (L - n + 1). Sequences shorter than n score 1.0.
    """
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def mean_accept_length(generations: Sequence[Generation]) -> float:
    """Return completion tokens per verify pass over all generations (the bonus included).

    The first token of each sequence comes from prefill, as in SGLang's spec_accept_length.
    """
    verify = sum(g.spec_verify_ct for g in generations)
    return sum(g.completion_tokens for g in generations) / verify if verify else float("nan")


def default_prompt_ids() -> list[list[int]]:
    """Return the shipped default prompt set as byte ids (the gate's default scenario's)."""
    return [list(prompt.encode("utf-8")) for prompt in load_prompt_set("default")]


def evaluation_prompt_ids() -> list[list[int]]:
    """Return 64 docstring-like prompts as byte ids."""
    return [list(f"{a} {b}".encode()) for a, b in product(OPENINGS, CONTINUATIONS)]


def measure_quality(
    target: Transformer,
    head: Eagle3Draft,
    steps: Sequence[int] = (1, 2, 3, 4, 5, 6),
    max_new_tokens: int = 64,
) -> dict[str, Any]:
    """Measure the models on the default prompts as the gate's default scenario runs them.

    Returns the target's greedy text (distinct 8-gram ratio, the first outputs), the head's
    accept length per chain length, and at 3 steps with its features in reversed order.
    """
    batch = [Request(prompt, max_new_tokens) for prompt in default_prompt_ids()]
    plain = PlainWorker(target).generate(batch)

    def accept_length(num_steps: int, layers: tuple[int, ...] | None = None) -> float:
        drafter = Eagle3Drafter(head, feature_layers=layers)
        worker = EagleWorker(target, drafter, SpecParams(num_steps, 1, num_steps + 1))
        return round(mean_accept_length(worker.generate(batch)), 4)

    reversed_layers = tuple(reversed(head.config.feature_layers))
    return {
        "distinct_8gram_ratio": round(
            statistics.fmean(distinct_ngram_ratio(g.output_ids) for g in plain), 4
        ),
        "greedy_samples": [decode_text(g.output_ids) for g in plain[:3]],
        "accept_length_by_steps": {str(s): accept_length(s) for s in steps},
        "accept_length_reversed_features_3_steps": accept_length(3, reversed_layers),
    }
