"""The decoding loops: speculative output equals plain greedy output, token for token."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from perfgate.engines.embedded.worker import (
    EagleWorker,
    Generation,
    PlainWorker,
    RequestError,
    SeqState,
    SpecParams,
    resolve_spec_params,
)
from perfgate.errors import ConfigError
from perfgate.probe.targets import EMBEDDED_TARGETS

from .common import DRAFT_KINDS, PROMPTS, SpecWorkerFactory

MAX_NEW_TOKENS = 40


@pytest.fixture(scope="module")
def plain_outputs(plain: PlainWorker) -> list[Generation]:
    return [plain.generate(prompt, MAX_NEW_TOKENS) for prompt in PROMPTS]


@pytest.mark.parametrize("num_steps", [1, 2, 3, 5])
@pytest.mark.parametrize("kind", DRAFT_KINDS)
def test_spec_output_equals_plain_greedy(
    spec_worker: SpecWorkerFactory, plain_outputs: list[Generation], kind: str, num_steps: int
) -> None:
    worker = spec_worker(kind, num_steps)
    for prompt, expected in zip(PROMPTS, plain_outputs, strict=True):
        generation = worker.generate(prompt, MAX_NEW_TOKENS)
        assert generation.output_ids == expected.output_ids
        assert generation.spec_verify_ct == len(generation.correct_drafts) > 0


@pytest.mark.parametrize("num_steps", [1, 3, 4])
def test_target_as_its_own_draft_accepts_every_draft(
    spec_worker: SpecWorkerFactory, num_steps: int
) -> None:
    generation = spec_worker("self", num_steps).generate(PROMPTS[1], MAX_NEW_TOKENS)
    # Accept length steps + 1 every cycle; the first token comes from prefill.
    assert generation.correct_drafts == (num_steps,) * generation.spec_verify_ct
    assert generation.spec_verify_ct == math.ceil((MAX_NEW_TOKENS - 1) / (num_steps + 1))


def test_rejection_mid_chain_rolls_back_and_stays_exact(
    spec_worker: SpecWorkerFactory, plain_outputs: list[Generation]
) -> None:
    num_steps = 4
    worker = spec_worker("perturbed", num_steps)
    counts: list[int] = []
    for prompt, expected in zip(PROMPTS, plain_outputs, strict=True):
        generation = worker.generate(prompt, MAX_NEW_TOKENS)
        assert generation.output_ids == expected.output_ids
        counts.extend(generation.correct_drafts)
    # Cycles that stopped mid-chain, after a full chain and after a miss at the first draft.
    assert any(0 < count < num_steps for count in counts)
    assert num_steps in counts
    assert 0 in counts


@pytest.mark.parametrize("kind", ["self", "perturbed"])
def test_max_new_tokens_is_honoured_exactly(
    spec_worker: SpecWorkerFactory, plain: PlainWorker, kind: str
) -> None:
    worker = spec_worker(kind, 3)
    expected = plain.generate(PROMPTS[0], 10).output_ids
    for max_new_tokens in range(11):  # every cut of the last cycle
        generation = worker.generate(PROMPTS[0], max_new_tokens)
        assert generation.output_ids == expected[:max_new_tokens]
        assert generation.completion_tokens == max_new_tokens
        assert len(plain.generate(PROMPTS[0], max_new_tokens).output_ids) == max_new_tokens


def test_cycle_runs_the_phases_in_order(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("perturbed", 3)
    calls: list[str] = []
    for phase in ("draft", "verify", "accept", "draft_extend"):
        method = getattr(worker, phase)
        setattr(worker, phase, _recording(method, phase, calls))
    generation = worker.generate(PROMPTS[0], 12)
    cycles = [calls[i : i + 4] for i in range(0, len(calls), 4)]
    assert len(cycles) == generation.spec_verify_ct
    assert all(c == ["draft", "verify", "accept", "draft_extend"] for c in cycles[:-1])
    assert cycles[-1][:3] == ["draft", "verify", "accept"]  # no extend once finished


def _recording(method: Callable[..., Any], phase: str, calls: list[str]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(phase)
        return method(*args, **kwargs)

    return wrapper


def test_probe_targets_name_real_methods() -> None:
    for target in EMBEDDED_TARGETS:
        module = __import__(target.module, fromlist=[target.qualname])
        assert callable(getattr(getattr(module, target.qualname), target.method))


def test_verify_delay_slows_verify_only(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("self", 2)
    delayed = EagleWorker(worker.target, worker.drafter, worker.params, verify_delay_ms=30.0)
    with torch.inference_mode():
        first = delayed.prefill(torch.tensor([PROMPTS[0]]))
        drafts = torch.tensor([1, 2])
        seq = SeqState(first, len(PROMPTS[0]), remaining=5)
        start = time.perf_counter()
        delayed.verify(seq, drafts)
        assert time.perf_counter() - start >= 0.030


def test_chain_params_follow_sglang_rules() -> None:
    assert resolve_spec_params(None, None, None) == SpecParams(3, 1, 4)
    assert resolve_spec_params(2, None, None) == SpecParams(2, 1, 3)
    assert resolve_spec_params(5, 1, 6) == SpecParams(5, 1, 6)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ((3, 4, 8), ["--speculative-eagle-topk", "tree drafting", "not supported yet"]),
        (
            (3, 1, 8),
            [
                "--speculative-num-draft-tokens: 8",
                "--speculative-num-steps 3",
                "pass --speculative-num-draft-tokens 4",
            ],
        ),
        ((0, 1, 1), ["--speculative-num-steps", "at least 1"]),
        ((None, 1, 4), ["--speculative-num-steps", "set all three"]),
    ],
)
def test_bad_chain_params_are_refused_with_the_flags_to_fix(
    flags: tuple[int | None, int | None, int | None], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_spec_params(*flags)
    for word in words:
        assert word in str(caught.value)


def test_requests_that_do_not_fit_are_refused(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("eagle3", 3)
    with pytest.raises(RequestError, match="context of 2048"):
        worker.check([1] * 2000, 45)
    worker.check([1] * 2000, 44)
    with pytest.raises(RequestError, match="empty"):
        worker.check([], 4)
    with pytest.raises(RequestError, match=r"0\.\.255"):
        worker.check([256], 4)
