"""Sampling with SGLang's parameters, plain and speculative."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from perfgate.engines.embedded.batch import Request
from perfgate.engines.embedded.model import KV_BUCKET, Transformer
from perfgate.engines.embedded.sampling import (
    GREEDY,
    Sampling,
    choose_tokens,
    sampling_tensors,
)
from perfgate.engines.embedded.worker import PlainWorker

from .common import CPU, PROMPTS, SpecWorkerFactory

LOGITS = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))  # a vocabulary of 4


def _frequencies(sampling: Sampling, draws: int = 20_000) -> torch.Tensor:
    params = sampling_tensors([sampling], CPU, vocab=4)
    assert params is not None
    logits = LOGITS.expand(1, draws, 4)
    coins = torch.rand(1, draws, generator=torch.Generator().manual_seed(0))
    tokens = choose_tokens(logits, params, coins)
    return torch.bincount(tokens[0], minlength=4).float() / draws


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        (Sampling(), [0.5, 0.25, 0.15, 0.1]),
        (Sampling(top_k=2), [2 / 3, 1 / 3, 0, 0]),
        (Sampling(top_p=0.7), [2 / 3, 1 / 3, 0, 0]),  # 0.5 < 0.7, 0.75 reaches it
        (Sampling(min_p=0.35), [2 / 3, 1 / 3, 0, 0]),  # 0.15 < 0.35 x 0.5
        (Sampling(temperature=0.5), [p * p / 0.345 for p in (0.5, 0.25, 0.15, 0.1)]),  # p^2
    ],
)
def test_tokens_are_drawn_from_sglangs_restricted_distribution(
    sampling: Sampling, expected: list[float]
) -> None:
    got = _frequencies(sampling)
    assert got.tolist() == pytest.approx(expected, abs=0.012)


def test_greedy_rows_take_the_argmax_beside_sampled_rows() -> None:
    params = sampling_tensors([GREEDY, Sampling()], CPU, vocab=4)
    assert params is not None
    logits = torch.stack([LOGITS.flip(0), LOGITS]).unsqueeze(1)  # [2, 1, 4]
    coins = torch.tensor([[0.99], [0.99]])  # the last bucket, for a sampled row
    assert choose_tokens(logits, params, coins).tolist() == [[3], [3]]
    assert sampling_tensors([GREEDY, Sampling(top_k=1)], CPU, vocab=4) is None


def test_speculative_sampling_commits_the_targets_tokens(
    plain: PlainWorker, spec_worker: SpecWorkerFactory
) -> None:
    # At a temperature this low every draw is the argmax, so a speculative worker that draws
    # the target's token after the right node, with the right coin, decodes the greedy output;
    # a misaligned node or coin would show as a divergence.
    near_greedy = Sampling(temperature=1e-4)
    greedy = [g.output_ids for g in plain.generate([Request(p, 24) for p in PROMPTS])]
    for kind, steps, topk, tokens in (("eagle3", 3, 1, None), ("perturbed", 3, 2, 6)):
        worker = spec_worker(kind, steps, topk, tokens)
        sampled = worker.generate([Request(p, 24, sampling=near_greedy) for p in PROMPTS])
        assert [s.output_ids for s in sampled] == greedy
        assert sum(s.spec_verify_ct for s in sampled) < 3 * 24  # drafts were accepted


@contextmanager
def caches_of(models: tuple[Transformer, ...], rows: int, slots: int) -> Iterator[None]:
    """The models' KV caches at rows x slots for the block, then at their former shape.

    Grown by a worker, a cache of a few rows that once held the whole context (2048 slots)
    keeps them: 300 rows of it are 2.5 GB of zeros a model, written while only the first
    slots are read, and held by the session's models for every test after."""
    before = [model.cache_shape() for model in models]
    for model in models:
        model.setup_cache(rows, slots)
    try:
        yield
    finally:
        for model, shape in zip(models, before, strict=True):
            model.setup_cache(*shape)


@pytest.mark.slow
def test_speculative_sampling_matches_plain_sampling_in_distribution(
    plain: PlainWorker, spec_worker: SpecWorkerFactory, target: Transformer, self_draft: Transformer
) -> None:
    # The first two output tokens of one prompt, sampled 300 times each way: the speculative
    # worker accepts drafts by the target's own draws, so its pairs follow the plain ones.
    def pairs(worker: PlainWorker | object, seed: int) -> dict[tuple[int, ...], int]:
        requests = [Request(list(b"The "), 2, sampling=Sampling(seed=seed + i)) for i in range(300)]
        counts: dict[tuple[int, ...], int] = {}
        for generation in worker.generate(requests):  # type: ignore[attr-defined]
            key = tuple(generation.output_ids)
            counts[key] = counts.get(key, 0) + 1
        return counts

    with caches_of((target, self_draft), 300, KV_BUCKET):  # the slots these requests read
        plain_pairs = pairs(plain, 0)
        spec_pairs = pairs(spec_worker("self", 2), 10_000)
    top = sorted(plain_pairs, key=plain_pairs.__getitem__, reverse=True)[:3]
    for pair in top:
        assert spec_pairs.get(pair, 0) / 300 == pytest.approx(plain_pairs[pair] / 300, abs=0.09)
