"""The decoding loops: speculative output equals plain greedy output, token for token."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from perfgate.engines.embedded.batch import Batch, Generation, Request, RequestError
from perfgate.engines.embedded.tree import chain_tree
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker
from perfgate.probe.targets import EMBEDDED_TARGETS

from .common import DRAFT_KINDS, PROMPTS, SpecWorkerFactory, requests

MAX_NEW_TOKENS = 40


@pytest.fixture(scope="module")
def plain_outputs(plain: PlainWorker) -> list[Generation]:
    return plain.generate(requests(PROMPTS, MAX_NEW_TOKENS))


@pytest.fixture(scope="module")
def chain_outputs(spec_worker: SpecWorkerFactory) -> Callable[[str, int], list[Generation]]:
    """(draft kind, num_steps) -> a chain's generations of PROMPTS, MAX_NEW_TOKENS each,
    decoded once for the tests that read the same ones: a generation starts over at position
    0, so a second would be the same."""

    @functools.cache
    def decode(kind: str, num_steps: int) -> list[Generation]:
        return spec_worker(kind, num_steps).generate(requests(PROMPTS, MAX_NEW_TOKENS))

    return decode


@pytest.mark.parametrize("num_steps", [1, 2, 3, 5])
@pytest.mark.parametrize("kind", DRAFT_KINDS)
def test_chain_output_equals_plain_greedy(
    chain_outputs: Callable[[str, int], list[Generation]],
    plain_outputs: list[Generation],
    kind: str,
    num_steps: int,
) -> None:
    generations = chain_outputs(kind, num_steps)
    for generation, expected in zip(generations, plain_outputs, strict=True):
        assert generation.output_ids == expected.output_ids
        assert generation.spec_verify_ct == len(generation.correct_drafts) > 0


def test_each_verify_pass_names_the_rows_decoding_and_the_drafts_each_accepted(
    spec_worker: SpecWorkerFactory,
) -> None:
    """What the probe writes into each cycle's record (perfgate/probe/targets.py)."""
    worker = spec_worker("perturbed", 3)
    passes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    accept = worker.accept

    def spy(*args: Any) -> Any:
        accepted = accept(*args)
        passes.append((accepted.rows, accepted.drafts))
        return accepted

    worker.accept = spy  # type: ignore[method-assign]
    prompts = [list(b"def parse(text):"), list(b"x")]
    generations = worker.generate(
        [Request(prompts[0], MAX_NEW_TOKENS), Request(prompts[1], MAX_NEW_TOKENS // 4)]
    )
    by_row: dict[int, list[int]] = {0: [], 1: []}
    for rows, drafts in passes:
        for row, count in zip(rows, drafts, strict=True):
            by_row[row].append(count)
    assert [tuple(by_row[0]), tuple(by_row[1])] == [g.correct_drafts for g in generations]
    # The short request finishes first: the passes after it name only the other row.
    assert passes[-1][0] == (0,) and passes[0][0] == (0, 1)


@pytest.mark.parametrize(
    ("num_steps", "topk", "num_draft_tokens"), [(2, 2, 4), (3, 4, 8), (4, 3, 12), (1, 4, 3)]
)
@pytest.mark.parametrize("kind", DRAFT_KINDS)
def test_tree_output_equals_plain_greedy(
    spec_worker: SpecWorkerFactory,
    plain_outputs: list[Generation],
    kind: str,
    num_steps: int,
    topk: int,
    num_draft_tokens: int,
) -> None:
    worker = spec_worker(kind, num_steps, topk, num_draft_tokens)
    generations = worker.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    for generation, expected in zip(generations, plain_outputs, strict=True):
        assert generation.output_ids == expected.output_ids
        assert max(generation.correct_drafts) <= num_steps


def test_a_tree_accepts_more_than_its_chain(
    spec_worker: SpecWorkerFactory, chain_outputs: Callable[[str, int], list[Generation]]
) -> None:
    """Side branches catch what the draft's first choice misses: more tokens per verify."""
    chain = chain_outputs("perturbed", 3)
    tree = spec_worker("perturbed", 3, 4, 16).generate(requests(PROMPTS, MAX_NEW_TOKENS))
    assert sum(g.accept_tokens for g in tree) / sum(g.spec_verify_ct for g in tree) > sum(
        g.accept_tokens for g in chain
    ) / sum(g.spec_verify_ct for g in chain)


@pytest.mark.parametrize("num_steps", [1, 3, 4])
def test_target_as_its_own_draft_accepts_every_draft(
    chain_outputs: Callable[[str, int], list[Generation]], num_steps: int
) -> None:
    generations = chain_outputs("self", num_steps)
    for generation in generations:
        # Accept length steps + 1 every cycle; the first token comes from prefill.
        assert generation.correct_drafts == (num_steps,) * generation.spec_verify_ct
        assert generation.spec_verify_ct == math.ceil((MAX_NEW_TOKENS - 1) / (num_steps + 1))


def test_rejection_mid_chain_rolls_back_and_stays_exact(
    spec_worker: SpecWorkerFactory, plain_outputs: list[Generation]
) -> None:
    num_steps = 4
    generations = spec_worker("perturbed", num_steps).generate(requests(PROMPTS, MAX_NEW_TOKENS))
    counts: list[int] = []
    for generation, expected in zip(generations, plain_outputs, strict=True):
        assert generation.output_ids == expected.output_ids
        counts.extend(generation.correct_drafts)
    # Cycles that stopped mid-chain, after a full chain and after a miss at the first draft.
    assert any(0 < count < num_steps for count in counts)
    assert num_steps in counts
    assert 0 in counts


def test_batch_outputs_equal_single_outputs(
    spec_worker: SpecWorkerFactory, plain: PlainWorker, plain_outputs: list[Generation]
) -> None:
    worker = spec_worker("perturbed", 3)
    for prompt, expected in zip(PROMPTS, plain_outputs, strict=True):
        assert plain.generate(requests([prompt], MAX_NEW_TOKENS))[0] == expected
        alone = worker.generate(requests([prompt], MAX_NEW_TOKENS))[0]
        assert alone.output_ids == expected.output_ids


def test_each_sequence_of_a_batch_keeps_its_own_counts(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("perturbed", 3)
    budgets = [MAX_NEW_TOKENS, 5, 0]
    batch = [Request(prompt, budget) for prompt, budget in zip(PROMPTS, budgets, strict=True)]
    generations = worker.generate(batch)
    assert [g.completion_tokens for g in generations] == budgets
    for generation, prompt, budget in zip(generations, PROMPTS, budgets, strict=True):
        alone = worker.generate([Request(prompt, budget)])[0]
        # The same tokens, the same verify passes: a sequence's counts ignore its neighbours.
        assert generation == alone
    assert generations[2].spec_verify_ct == 0


@pytest.mark.parametrize("kind", ["self", "perturbed"])
def test_max_new_tokens_is_honoured_exactly(
    spec_worker: SpecWorkerFactory, plain: PlainWorker, kind: str
) -> None:
    worker = spec_worker(kind, 3)
    expected = plain.generate(requests(PROMPTS[:1], 10))[0].output_ids
    for max_new_tokens in range(11):  # every cut of the last cycle
        generation = worker.generate(requests(PROMPTS[:1], max_new_tokens))[0]
        assert generation.output_ids == expected[:max_new_tokens]
        assert generation.completion_tokens == max_new_tokens


def test_plain_decoding_honours_max_new_tokens_exactly(plain: PlainWorker) -> None:
    """Once, not per draft kind above: plain decoding has none."""
    expected = plain.generate(requests(PROMPTS[:1], 10))[0].output_ids
    for max_new_tokens in range(11):
        plain_cut = plain.generate(requests(PROMPTS[:1], max_new_tokens))[0]
        assert plain_cut.output_ids == expected[:max_new_tokens]


@pytest.mark.parametrize(("topk", "num_draft_tokens"), [(1, 4), (2, 6)])
def test_emulated_cuda_graphs_give_the_same_outputs(
    spec_worker: SpecWorkerFactory,
    plain_outputs: list[Generation],
    topk: int,
    num_draft_tokens: int,
) -> None:
    """Every phase on fixed buffers, outputs overwritten call after call, as on CUDA."""
    worker = spec_worker("perturbed", 3, topk, num_draft_tokens, graphs="emulate")
    generations = worker.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    assert [g.output_ids for g in generations] == [g.output_ids for g in plain_outputs]
    assert worker.graphs.captures >= 4  # draft, verify, accept, extend
    plain = PlainWorker(worker.target, worker.graphs)
    assert plain.generate(requests(PROMPTS, MAX_NEW_TOKENS)) == plain_outputs


def test_prefill_graphs_replay_per_shape_give_the_same_outputs_and_stop_at_their_cap(
    spec_worker: SpecWorkerFactory,
    plain_outputs: list[Generation],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--cuda-graph-backend-prefill full: the target's prefill runs on one graph per batch
    shape (emulated here: fixed buffers, outputs overwritten call after call), a batch of the
    same shape replays it, and past PREFILL_SHAPES shapes prefills run eagerly; outputs stay
    the target's greedy ones throughout, for speculative and plain decoding alike."""
    worker = spec_worker("eagle3", 3, graphs="emulate")
    worker.graphs.prefill = True
    expected = [g.output_ids for g in plain_outputs]
    assert [g.output_ids for g in worker.generate(requests(PROMPTS, MAX_NEW_TOKENS))] == expected
    assert worker.graphs.prefills == 1
    captures = worker.graphs.captures
    # The same shape, the prompts in another order: replayed on the same buffers, nothing new.
    flipped = worker.generate(requests(PROMPTS[::-1], MAX_NEW_TOKENS))
    assert [g.output_ids for g in flipped] == expected[::-1]
    assert worker.graphs.captures == captures and worker.graphs.prefills == 1
    plain = PlainWorker(worker.target, worker.graphs)  # the plain path's own prefill shape
    assert plain.generate(requests(PROMPTS, MAX_NEW_TOKENS)) == plain_outputs
    assert worker.graphs.prefills == 2
    # At the cap, a new shape (one prompt alone) runs eagerly and is not captured.
    monkeypatch.setattr("perfgate.engines.embedded.graphs.PREFILL_SHAPES", 2)
    alone = worker.generate(requests(PROMPTS[:1], MAX_NEW_TOKENS))
    assert [g.output_ids for g in alone] == expected[:1]
    assert worker.graphs.prefills == 2
    # Nor is a batch of more tokens than PREFILL_TOKENS, whatever the count.
    monkeypatch.setattr("perfgate.engines.embedded.graphs.PREFILL_SHAPES", 8)
    monkeypatch.setattr("perfgate.engines.embedded.graphs.PREFILL_TOKENS", 2)
    assert worker.generate(requests(PROMPTS[2:], MAX_NEW_TOKENS))[0].output_ids == expected[2]
    assert worker.graphs.prefills == 3  # one prompt of one token: within the budget
    assert [g.output_ids for g in worker.generate(requests(PROMPTS[1:2], MAX_NEW_TOKENS))] == [
        expected[1]
    ]
    assert worker.graphs.prefills == 3  # 43 tokens: eager
    # Without it (the default), prefills are never captured.
    eager = spec_worker("eagle3", 3, graphs="emulate")
    eager.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    assert eager.graphs.prefills == 0


def test_logprobs_are_the_targets_for_spec_and_plain(
    spec_worker: SpecWorkerFactory, plain: PlainWorker
) -> None:
    batch = [Request(prompt, 12, top) for prompt, top in zip(PROMPTS, (3, 0, None), strict=True)]
    expected = plain.generate(batch)
    generations = spec_worker("perturbed", 3).generate(batch)
    for generation, reference in zip(generations, expected, strict=True):
        assert generation.output_ids == reference.output_ids
        if reference.output_logprobs is None:
            assert generation.output_logprobs is None
            continue
        assert generation.output_logprobs == pytest.approx(reference.output_logprobs, abs=1e-4)
        assert reference.output_top_logprobs is not None
        assert generation.output_top_logprobs is not None
        for top, top_reference in zip(
            generation.output_top_logprobs, reference.output_top_logprobs, strict=True
        ):
            assert [t for _, t in top] == [t for _, t in top_reference]
    first = expected[0]
    assert first.output_top_logprobs is not None and first.output_logprobs is not None
    # Greedy: each output token is its position's most likely one.
    assert all(
        top[0][1] == token
        for top, token in zip(first.output_top_logprobs, first.output_ids, strict=True)
    )
    assert all(len(top) == 3 for top in first.output_top_logprobs)
    assert all(len(top) == 0 for top in expected[1].output_top_logprobs or ())


@pytest.mark.parametrize(
    ("overlap", "order"),
    [
        (True, ["draft", "verify", "accept", "draft_extend", "keep"]),
        (False, ["draft", "verify", "accept", "keep", "draft_extend"]),
    ],
)
def test_cycle_runs_the_phases_in_order(
    spec_worker: SpecWorkerFactory, monkeypatch: pytest.MonkeyPatch, overlap: bool, order: list[str]
) -> None:
    """The draft extend is queued inside accept, before the host keeps the accepted tokens
    (the cycle's one sync), so that on a GPU it runs while the host waits; after it, with
    --disable-overlap-schedule."""
    worker = spec_worker("perturbed", 3)
    worker.overlap = overlap
    calls: list[str] = []
    for phase in ("draft", "verify", "accept", "draft_extend"):
        method = getattr(worker, phase)
        setattr(worker, phase, _recording(method, phase, calls))
    monkeypatch.setattr(Batch, "finish_commit", _recording(Batch.finish_commit, "keep", calls))
    generation = worker.generate(requests(PROMPTS[:1], 12))[0]
    assert calls[0] == "keep"  # the prefill's first token
    cycles = " ".join(calls[1:]).replace("draft verify", "| draft verify").split("| ")[1:]
    assert len(cycles) == generation.spec_verify_ct
    assert all(c.split() == order for c in cycles[:-1])
    last = cycles[-1].split()
    assert last in (order, [p for p in order if p != "draft_extend"])  # see below


@pytest.mark.parametrize("overlap", [True, False])
def test_a_plain_step_is_queued_before_the_host_keeps_the_last_ones_tokens(
    plain: PlainWorker,
    plain_outputs: list[Generation],
    monkeypatch: pytest.MonkeyPatch,
    overlap: bool,
) -> None:
    """Plain decoding knows every control decision without the tokens (one a step for each
    sequence still decoding), so each step is queued before the host keeps the last step's
    tokens, and none is queued past the end; serial with --disable-overlap-schedule."""
    worker = PlainWorker(plain.target, overlap=overlap)
    calls: list[str] = []
    worker.decode_step = _recording(worker.decode_step, "step", calls)  # type: ignore[method-assign]
    monkeypatch.setattr(Batch, "finish_commit", _recording(Batch.finish_commit, "keep", calls))
    seen: list[int] = []
    generations = worker.generate(
        requests(PROMPTS, MAX_NEW_TOKENS), lambda batch: seen.append(len(batch.outputs[0]))
    )
    assert generations == plain_outputs
    steps = MAX_NEW_TOKENS - 1  # the prefill makes the first token, and keeps it at once
    if overlap:  # step 1, then each step before the last one's tokens are kept, then the last
        assert calls == ["keep", "step", *["step", "keep"] * (steps - 1), "keep"]
    else:
        assert calls == ["keep", *["step", "keep"] * steps]
    assert seen == list(range(1, MAX_NEW_TOKENS + 1))  # the batch after every step, in order


@pytest.mark.parametrize(("last_cycle_budget", "extends_in_last_cycle"), [(1, 0), (3, 1)])
def test_no_extend_where_the_cycle_surely_finishes_every_sequence(
    spec_worker: SpecWorkerFactory, last_cycle_budget: int, extends_in_last_cycle: int
) -> None:
    """Like SGLang's, a cycle that leaves nothing to decode runs no draft extend. Whether it
    does is known before its tokens reach the host only where every sequence has one token
    left; else the extend is queued, and unused."""
    worker = spec_worker("self", 2)  # accepts both drafts: 3 tokens a cycle
    extends: list[str] = []
    worker.draft_extend = _recording(worker.draft_extend, "draft_extend", extends)  # type: ignore[method-assign]
    cycles = 4
    max_new_tokens = 1 + 3 * (cycles - 1) + last_cycle_budget  # the prefill commits one
    generation = worker.generate(requests(PROMPTS[:1], max_new_tokens))[0]
    assert generation.spec_verify_ct == cycles
    assert len(extends) == cycles - 1 + extends_in_last_cycle


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
        batch = Batch(requests(PROMPTS[:1], 5), worker.device, worker.target.max_seq_len)
        tree = chain_tree(torch.tensor([1]), torch.tensor([[2, 3]]))
        start = time.perf_counter()
        delayed.verify(batch, tree)
        assert time.perf_counter() - start >= 0.030


def test_simulated_acceptance_sets_the_accept_length(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("eagle3", 3)
    simulated = EagleWorker(worker.target, worker.drafter, worker.params, simulate_accept_rate=1.0)
    generations = simulated.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    assert all(g.correct_drafts == (3,) * g.spec_verify_ct for g in generations)
    never = EagleWorker(worker.target, worker.drafter, worker.params, simulate_accept_rate=0.0)
    assert all(set(g.correct_drafts) == {0} for g in never.generate(requests(PROMPTS, 8)))


def test_requests_that_do_not_fit_are_refused(spec_worker: SpecWorkerFactory) -> None:
    worker = spec_worker("eagle3", 3)
    lookahead = worker.params.lookahead
    with pytest.raises(RequestError, match="context of 2048"):
        worker.check(Request([1] * 2000, 49 - lookahead))
    worker.check(Request([1] * 2000, 48 - lookahead))
    with pytest.raises(RequestError, match="empty"):
        worker.check(Request([], 4))
    with pytest.raises(RequestError, match=r"0\.\.255"):
        worker.check(Request([256], 4))
    with pytest.raises(RequestError, match="top_logprobs_num"):
        worker.check(Request([1], 4, 300))


def test_verify_is_timed_at_each_width_after_a_batch_and_outputs_stay_exact(
    spec_worker: SpecWorkerFactory, plain_outputs: list[Generation], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--debug-time-verify-widths: the first batch after it is asked for times the verify
    forward at the widths named and at the run's own, on fixed buffers as on CUDA; that batch
    and the next stay the target's greedy outputs, and the next times nothing again."""
    # Two rounds, not 20: the timings' precision is not checked here, and the rounds' order
    # is (test_a_narrow_chain_is_the_drafted_chain_cut_to_its_width, at 3).
    monkeypatch.setattr("perfgate.engines.embedded.worker.WIDTH_REPLAYS", 2)
    worker = spec_worker("perturbed", 4, graphs="emulate")
    worker.verify_widths = (2,)
    first = worker.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    timed = dict(worker.verify_ms_by_width)
    assert sorted(timed) == [2, 5] and all(ms > 0 for ms in timed.values())
    second = worker.generate(requests(PROMPTS, MAX_NEW_TOKENS))
    expected = [g.output_ids for g in plain_outputs]
    assert [g.output_ids for g in first] == expected == [g.output_ids for g in second]
    assert worker.verify_ms_by_width == timed  # once only


def test_a_narrow_chain_is_the_drafted_chain_cut_to_its_width(
    spec_worker: SpecWorkerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = spec_worker("self", 3)
    monkeypatch.setattr("perfgate.engines.embedded.worker.WIDTH_REPLAYS", 3)
    seen: list[tuple[int, list[int]]] = []
    forward = worker._verify_forward

    def noted(batch: Batch, tree: Any) -> Any:
        seen.append((tree.size, tree.depths[0].tolist()))
        return forward(batch, tree)

    monkeypatch.setattr(worker, "_verify_forward", noted)
    worker.verify_widths = (1, 2)
    worker.generate(requests(PROMPTS[:2], 6))
    calibration = seen[-(3 + 3 * 3) :]  # each width captured once, then three rounds in turn
    assert worker.verify_ms_by_width.keys() == {1, 2, 4}
    assert calibration[:3] == [(1, [0]), (2, [0, 1]), (4, [0, 1, 2, 3])]
    assert calibration[3:] == calibration[:3] * 3
