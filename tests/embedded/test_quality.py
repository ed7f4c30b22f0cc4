"""The shipped models' quality bars, as the default scenario runs them (CPU, fp32).

- the target's greedy continuations are varied text, not a loop;
- at 3 steps, topk 1 the EAGLE-3 head's mean accept length on the default prompts is >= 2.0;
- the target drafting for itself accepts every draft: exactly steps + 1 per cycle;
- the head fed the wrong target layers (a wiring bug) accepts measurably less;
- speculative outputs are token-identical to plain greedy decoding on 64 prompts.
"""

from __future__ import annotations

import statistics

import pytest

from perfgate.engines.embedded.batch import Generation, Request
from perfgate.engines.embedded.evaluate import (
    default_prompt_ids,
    distinct_ngram_ratio,
    evaluation_prompt_ids,
    mean_accept_length,
)
from perfgate.engines.embedded.model import Eagle3Draft
from perfgate.engines.embedded.worker import PlainWorker

from .common import SpecWorkerFactory

MAX_NEW_TOKENS = 64  # the default scenario's
STEPS = 3


def _batch(prompts: list[list[int]]) -> list[Request]:
    return [Request(prompt, MAX_NEW_TOKENS) for prompt in prompts]


@pytest.fixture(scope="module")
def default_plain(plain: PlainWorker) -> list[Generation]:
    return plain.generate(_batch(default_prompt_ids()))


def test_greedy_continuations_are_varied_text(default_plain: list[Generation]) -> None:
    ratios = [distinct_ngram_ratio(g.output_ids) for g in default_plain]
    # A loop like "of the command line of the command line" scores about 0.35.
    assert statistics.fmean(ratios) >= 0.8, ratios
    assert min(ratios) >= 0.5, ratios
    assert len({tuple(g.output_ids) for g in default_plain}) == len(default_plain)


def test_eagle3_head_accepts_two_tokens_per_cycle_at_three_steps(
    spec_worker: SpecWorkerFactory, default_plain: list[Generation]
) -> None:
    generations = spec_worker("eagle3", STEPS).generate(_batch(default_prompt_ids()))
    assert [g.output_ids for g in generations] == [g.output_ids for g in default_plain]
    assert mean_accept_length(generations) >= 2.0


def test_target_as_its_own_draft_accepts_exactly_steps_plus_one(
    spec_worker: SpecWorkerFactory,
) -> None:
    generations = spec_worker("self", STEPS).generate(_batch(default_prompt_ids()))
    for generation in generations:
        assert generation.correct_drafts == (STEPS,) * generation.spec_verify_ct
    # 63 tokens after the prefill's first, 4 per cycle: 16 cycles, the last one cut short.
    assert mean_accept_length(generations) == pytest.approx(MAX_NEW_TOKENS / 16)


def test_the_head_fed_the_wrong_layers_accepts_less(
    spec_worker: SpecWorkerFactory, eagle_head: Eagle3Draft, default_plain: list[Generation]
) -> None:
    batch = _batch(default_prompt_ids())
    right = mean_accept_length(spec_worker("eagle3", STEPS).generate(batch))
    reversed_layers = tuple(reversed(eagle_head.config.feature_layers))
    worker = spec_worker("eagle3", STEPS, feature_layers=reversed_layers)
    wrong_generations = worker.generate(batch)
    # Still exact: a wiring bug in the draft costs speed, never correctness.
    assert [g.output_ids for g in wrong_generations] == [g.output_ids for g in default_plain]
    assert mean_accept_length(wrong_generations) <= 0.9 * right


@pytest.mark.slow
@pytest.mark.parametrize(("topk", "num_draft_tokens"), [(1, STEPS + 1), (4, 8)])
def test_spec_equals_plain_greedy_on_64_prompts(
    spec_worker: SpecWorkerFactory, plain: PlainWorker, topk: int, num_draft_tokens: int
) -> None:
    batch = _batch(evaluation_prompt_ids())
    expected = plain.generate(batch)
    generations = spec_worker("eagle3", STEPS, topk, num_draft_tokens).generate(batch)
    mismatched = [
        i
        for i, (g, e) in enumerate(zip(generations, expected, strict=True))
        if g.output_ids != e.output_ids
    ]
    assert not mismatched, f"prompts {mismatched} differ"
    # One batch of 64 or one prompt at a time: the same tokens.
    for request, generation in zip(batch[:8], expected[:8], strict=True):
        assert plain.generate([request])[0].output_ids == generation.output_ids
