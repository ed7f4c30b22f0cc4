"""The training recipe reproduces the shipped models: the same losses, within stated bounds.

The full training takes about an hour on two cores; these tests rerun its first steps and
evaluate the shipped weights, in well under a minute. The corpus is this interpreter's stdlib
docstrings: on the Python version the weights were trained on (recorded in training.json) the
losses agree closely; on another version the docstrings differ a little, and so may the losses.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from perfgate.cli import main as cli_main
from perfgate.engines.embedded import train
from perfgate.engines.embedded.corpus import EVAL_BUCKET, Corpus, load_corpus, stdlib_root
from perfgate.engines.embedded.loading import MODELS_DIR, load_draft, load_target
from perfgate.engines.embedded.losses import draft_loss, unroll_mask
from perfgate.engines.embedded.model import Eagle3Draft, Transformer
from perfgate.progress import Reporter

from ..conftest import FakeStream
from .common import CPU

CHECK_STEPS = 20
# Relative bounds on the losses. On the same corpus a rerun differs by floating-point reduction
# order only (threads, CPU): 1 or 2 threads here agree to 5 decimals. Another Python's corpus
# differs by a few docstrings, which moves every sampled window: a few percent.
SAME_CORPUS_BOUND = 0.01
OTHER_CORPUS_BOUND = 0.10


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return json.loads((MODELS_DIR / train.TARGET_NAME / train.RECORD_FILE).read_text())


@pytest.fixture(scope="module")
def bound(record: dict[str, Any], corpus: Corpus) -> float:
    if len(corpus.text) < train.MIN_CORPUS_BYTES:
        pytest.fail(f"{stdlib_root()}: this Python's standard library ships no sources to train on")
    return SAME_CORPUS_BOUND if corpus.digest == record["corpus_sha256"] else OTHER_CORPUS_BOUND


def test_the_record_pins_what_the_weights_were_trained_on(record: dict[str, Any]) -> None:
    draft_record = json.loads((MODELS_DIR / train.DRAFT_NAME / train.RECORD_FILE).read_text())
    assert draft_record == record
    assert {"python_version", "corpus_sha256", "corpus_bytes", "torch_version"} <= record.keys()
    assert [spec["name"] for spec in record["recipe"]] == [p.name for p in train.RECIPE]
    assert record["recipe"] == [asdict(p) for p in train.RECIPE]


@pytest.mark.slow  # reruns training steps or the whole recipe at a small scale
def test_the_corpus_is_built_deterministically(record: dict[str, Any], corpus: Corpus) -> None:
    again = load_corpus.__wrapped__()  # a build of its own, not the session's (cached) one
    assert again.digest == corpus.digest
    if corpus.python_version == record["python_version"]:
        assert corpus.digest == record["corpus_sha256"]
    assert len(corpus.text) > train.MIN_CORPUS_BYTES and len(corpus.split(EVAL_BUCKET)) > 10_000


@pytest.mark.slow  # reruns training steps or the whole recipe at a small scale
def test_pretraining_reproduces_its_first_losses(
    record: dict[str, Any], bound: float, corpus: Corpus
) -> None:
    model = train.build_target()
    spec = train.phase("pretrain")
    losses = train.run_target_phase(model, spec, train.sources_of(corpus, spec), CHECK_STEPS)
    expected = record["losses"]["pretrain"][str(CHECK_STEPS)]
    assert train.checkpoints(losses)[str(CHECK_STEPS)] == pytest.approx(expected, rel=bound)


@pytest.mark.slow  # reruns training steps or the whole recipe at a small scale
def test_draft_distillation_reproduces_its_first_losses(
    record: dict[str, Any], bound: float, corpus: Corpus
) -> None:
    frozen = load_target(train.NAME_PREFIX + train.TARGET_NAME, CPU, torch.float32)
    head = train.build_draft(frozen)
    spec = train.phase("draft")
    sources = train.sources_of(corpus, spec)
    losses = train.run_draft_phase(head, frozen, spec, sources, CHECK_STEPS)
    expected = record["losses"]["draft"][str(CHECK_STEPS)]
    assert train.checkpoints(losses)[str(CHECK_STEPS)] == pytest.approx(expected, rel=bound)


@pytest.mark.slow  # reruns training steps or the whole recipe at a small scale
def test_the_shipped_weights_score_what_training_recorded(
    record: dict[str, Any],
    bound: float,
    corpus: Corpus,
    target: Transformer,
    eagle_head: Eagle3Draft,
) -> None:
    data = train.as_tokens(corpus.split(EVAL_BUCKET))
    scores = train.evaluate(target, eagle_head, data, train.phase("draft").unroll)
    assert scores["target_loss"] == pytest.approx(record["eval"]["target_loss"], rel=bound)
    assert scores["draft_agreement"] == pytest.approx(record["eval"]["draft_agreement"], rel=bound)


def test_the_head_trains_on_attention_whose_backward_is_deterministic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head's masked attention runs on PyTorch's math backend alone, never the
    memory-efficient kernels whose backward differs from run to run on a GPU; the frozen
    target's features keep the default backends."""
    seen: list[tuple[bool, bool, bool]] = []
    attend = torch.nn.functional.scaled_dot_product_attention

    def watched(*args: Any, **kwargs: Any) -> torch.Tensor:
        backends = torch.backends.cuda
        only_math = backends.math_sdp_enabled() and not (
            backends.mem_efficient_sdp_enabled() or backends.flash_sdp_enabled()
        )
        seen.append((kwargs.get("attn_mask") is not None, only_math, torch.is_grad_enabled()))
        return attend(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", watched)
    frozen = load_target(train.NAME_PREFIX + train.TARGET_NAME, CPU, torch.float32)
    head = train.build_draft(frozen)
    batch = torch.randint(0, 256, (2, 17))
    draft_loss(head, frozen, batch, unroll=2).backward()  # type: ignore[no-untyped-call]
    head_calls = [s for s in seen if s[0]]
    assert len(head_calls) == 2 and all(only_math and grad for _, only_math, grad in head_calls)
    target_calls = [s for s in seen if not s[0]]
    assert target_calls and not any(only_math for _, only_math, _ in target_calls)


def test_unrolled_steps_see_the_prefix_and_their_own_drafts() -> None:
    mask = unroll_mask(anchors=3, step=2, device=CPU)[0, 0].int().tolist()
    # Columns: step-0 entries of anchors 0..2, then step 1's, then step 2's.
    assert mask == [
        [1, 0, 0, 1, 0, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 1, 0, 0, 1],
    ]


def test_a_log_gets_the_first_last_and_every_tenth_step_with_its_loss() -> None:
    weight = torch.nn.Parameter(torch.zeros(3))
    spec = replace(train.phase("finetune"), steps=30, warmup=1)
    stream = FakeStream(tty=False)
    losses = train.train_loop(
        [weight],
        lambda batch: ((weight - batch) ** 2).sum(),
        itertools.repeat(torch.ones(3)),
        spec,
        progress=Reporter(stream),
    )
    lines = stream.getvalue().splitlines()
    found = [re.fullmatch(r"finetune: step (\d+) of 30, [\d.]+ s, loss [\d.]+", s) for s in lines]
    assert [int(m[1]) if m else None for m in found] == [
        1,
        3,
        6,
        9,
        12,
        15,
        18,
        21,
        24,
        27,
        30,
        None,
    ]
    assert re.fullmatch(r"finetune: 30 steps in [\d.]+ s", lines[-1])
    last = float(lines[-2].rpartition(" ")[2])
    assert last == pytest.approx(
        sum(losses[-train.SHOWN_LOSS_STEPS :]) / train.SHOWN_LOSS_STEPS, abs=1e-4
    )


def test_a_terminal_gets_a_bar_of_the_steps() -> None:
    weight = torch.nn.Parameter(torch.zeros(3))
    spec = replace(train.phase("draft"), steps=5, warmup=1)
    stream = FakeStream(tty=True)
    progress = Reporter(stream, interval_s=0.0, width=lambda: 120, environ={"TERM": "xterm"})
    batches = itertools.repeat(torch.ones(3))
    train.train_loop(
        [weight], lambda b: ((weight - b) ** 2).sum(), batches, spec, progress=progress
    )
    shown = stream.getvalue()
    assert "\r\x1b[Kdraft: [============>       ] step 3 of 5, " in shown
    assert re.search(r"\x1b\[32mdraft: 5 steps in [\d.]+ s\x1b\[0m\n$", shown)


@pytest.mark.slow  # reruns training steps or the whole recipe at a small scale
def test_the_command_trains_and_writes_loadable_models(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    corpus: Corpus,
) -> None:
    monkeypatch.setattr(train, "load_corpus", lambda: corpus)  # the session's, not a rebuild
    flags = ["--out", str(tmp_path), "--scale", "0.001", "--skip-quality"]
    assert cli_main(["embedded", "train", *flags]) == 0
    out, err = capsys.readouterr()
    assert not out, "progress goes to stderr"
    for line in (
        "pretrain: step 1 of 1, ",
        "finetune: 1 step in ",
        "draft: 1 step in ",
        "evaluation: done in ",
        "trained on cpu (",
    ):
        assert line in err
    assert "\r" not in err
    target = load_target(str(tmp_path / train.TARGET_NAME), CPU, torch.float32)
    load_draft(str(tmp_path / train.DRAFT_NAME), target, CPU, torch.float32)
    written = json.loads((tmp_path / train.TARGET_NAME / train.RECORD_FILE).read_text())
    assert written["recipe"][0]["steps"] == 1 and written["quality"] is None
