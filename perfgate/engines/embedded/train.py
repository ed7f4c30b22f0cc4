"""Train the shipped models: ``python -m perfgate.engines.embedded.train --out DIR``.

The recipe, on the stdlib docstrings (``corpus.py``), byte-level, fp32 on CPU:

1. ``pretrain``: the target learns the whole corpus (next-byte cross-entropy).
2. ``finetune``: the target learns a small subset by heart. A small model trained only on the
   broad corpus decodes greedily into loops ("of the command line of the command line ...");
   a model that has memorised some text continues a prompt with varied text instead.
3. ``draft``: the EAGLE-3 head is distilled from the frozen target: on each window it reads the
   target's low/mid/high features and learns the target's next-token distribution, unrolled
   over ``unroll`` steps that feed the head its own output hidden state, as it runs when
   drafting (EAGLE-3's training-time test).

Each phase draws its windows from a generator seeded by the recipe, so a run is reproducible
up to floating-point reduction order; ``training.json`` beside the weights records the corpus
(Python version, digest), the recipe, the loss curve at checkpoints and the evaluation.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfgate.engines.embedded.corpus import (
    EVAL_BUCKET,
    FINETUNE_BUCKET,
    Corpus,
    load_corpus,
    stdlib_root,
)
from perfgate.engines.embedded.evaluate import measure_quality
from perfgate.engines.embedded.loading import (
    CONFIG_FILE,
    MODELS_DIR,
    NAME_PREFIX,
    draft_config,
    resolve_model,
    save_weights,
    target_config,
)
from perfgate.engines.embedded.model import (
    Attention,
    AttentionView,
    Eagle3Draft,
    KVStore,
    Transformer,
    init_weights,
)
from perfgate.engines.embedded.train_args import add_train_arguments
from perfgate.errors import ConfigError
from perfgate.progress import SILENT, Reporter, stderr_reporter

TARGET_NAME = "llama-tiny"
DRAFT_NAME = "eagle3-llama-tiny"
RECORD_FILE = "training.json"
CHECKPOINT_STEPS = (10, 20, 30, 100)  # mean loss of the 10 steps up to each is recorded
SHOWN_LOSS_STEPS = 20  # progress shows the mean loss of this many steps: one step's is noisy
EVAL_WINDOWS = 64
MIN_CORPUS_BYTES = 500_000  # the stdlib's docstrings are about 1.6 MB


@dataclass(frozen=True)
class Phase:
    name: str
    steps: int
    lr: float
    warmup: int
    batch_size: int = 32
    seq_len: int = 128
    weight_decay: float = 0.1
    seed: int = 0
    unroll: int = 1  # draft only: training-time-test steps


RECIPE: tuple[Phase, ...] = (
    Phase("pretrain", steps=1000, lr=3e-3, warmup=100, seed=10),
    Phase("finetune", steps=400, lr=1e-3, warmup=20, seed=11),
    Phase("draft", steps=1000, lr=3e-3, warmup=100, seed=12, unroll=3),
)


def phase(name: str) -> Phase:
    """Return the recipe's phase called name."""
    return next(p for p in RECIPE if p.name == name)


def lr_at(step: int, spec: Phase) -> float:
    """Linear warm-up, then a cosine decay to a tenth of the peak."""
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    progress = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return spec.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def as_tokens(data: bytes) -> Tensor:
    """Return bytes as a long tensor of token ids."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def iter_windows(sources: Sequence[Tensor], spec: Phase) -> Iterator[Tensor]:
    """Yield batches [batch_size, seq_len] of random windows, drawn evenly from sources."""
    generator = torch.Generator().manual_seed(spec.seed)
    while True:
        rows = []
        for row in range(spec.batch_size):
            data = sources[row % len(sources)]
            start = int(torch.randint(0, len(data) - spec.seq_len, (1,), generator=generator))
            rows.append(data[start : start + spec.seq_len])
        yield torch.stack(rows)


def train_loop(
    params: list[nn.Parameter],
    loss_fn: Callable[[Tensor], Tensor],
    batches: Iterator[Tensor],
    spec: Phase,
    max_steps: int | None = None,
    progress: Reporter = SILENT,
) -> list[float]:
    """Run AdamW over the phase's steps (or the first max_steps); return the loss per step."""
    optimizer = torch.optim.AdamW(
        params, lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay
    )
    losses: list[float] = []
    steps = spec.steps if max_steps is None else min(max_steps, spec.steps)
    with progress.step(spec.name, total=steps, unit="step") as shown:
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, spec)
            loss = loss_fn(next(batches))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
            shown.advance(lambda: f"loss {_mean(losses[-SHOWN_LOSS_STEPS:]):.4f}")
    return losses


def target_loss(model: Transformer, batch: Tensor) -> Tensor:
    """Next-byte cross-entropy of the target over a batch [B, T]."""
    logits, _ = model(batch[:, :-1], _positions(batch[:, :-1]))
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())


class UnrollKV(KVStore):
    """Keys and values of every unrolled step so far, concatenated along the key axis."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []

    def update(self, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


def unroll_mask(anchors: int, step: int, device: torch.device) -> Tensor:
    """Return the mask [1, 1, anchors, (step + 1) · anchors] of unrolled step `step`.

    The query of anchor i at step k sits at position i + k, as the k-th drafted token after
    the last committed one does. It sees the step-0 entries of anchors j <= i (the positions
    drafted from true target features) and its own entries of steps 1..k (its own drafts).
    """
    causal = torch.ones(anchors, anchors, dtype=torch.bool, device=device).tril()
    own = torch.eye(anchors, dtype=torch.bool, device=device)
    return torch.cat([causal] + [own] * step, dim=1).view(1, 1, anchors, -1)


class StepResult(NamedTuple):
    loss: Tensor  # soft cross-entropy against the target, mean over valid anchors
    agreement: float  # how often the head's top token is the target's


def draft_steps(
    head: Eagle3Draft, target: Transformer, batch: Tensor, unroll: int
) -> list[StepResult]:
    """Run the head over a batch [B, T] for `unroll` training-time-test steps.

    Anchor i reads (token i + 1, target feature i) at step 0 and learns the target's
    distribution after token i + 1; step k reads (token i + 1 + k, its own step k - 1 output
    hidden) and learns the distribution after token i + 1 + k.
    """
    teacher, features = target_outputs(target, head.config.feature_layers, batch)
    anchors = batch.shape[1] - 1
    hidden = head.fuse(features[:, :anchors])
    results = []
    attentions = [m for m in head.modules() if isinstance(m, Attention)]
    for attention in attentions:
        attention.kv_cache = UnrollKV()
    try:
        for step in range(unroll):
            tokens, labels, valid = _shifted(batch, teacher, step, anchors)
            positions = _positions(tokens) + step
            view = AttentionView(positions, unroll_mask(anchors, step, batch.device))
            logits, hidden = head(tokens, hidden, positions, view)
            per_token = -(labels * F.log_softmax(logits, dim=-1)).sum(-1)
            agree = (logits.argmax(-1) == labels.argmax(-1)).float()
            results.append(
                StepResult(
                    (per_token * valid).sum() / valid.sum(),
                    float((agree * valid).sum() / valid.sum()),
                )
            )
    finally:
        for attention in attentions:
            attention.kv_cache = None
    return results


def draft_loss(head: Eagle3Draft, target: Transformer, batch: Tensor, unroll: int) -> Tensor:
    """The head's training loss: the mean of its unrolled steps' losses."""
    results = draft_steps(head, target, batch, unroll)
    return torch.stack([r.loss for r in results]).mean()


@torch.no_grad()
def target_outputs(
    target: Transformer, layers: Sequence[int], batch: Tensor
) -> tuple[Tensor, Tensor]:
    """Return the target's next-token distributions [B, T, V] and features [B, T, 3·dim]."""
    logits, hidden = target(batch, _positions(batch), None, layers)
    return F.softmax(logits.float(), dim=-1), torch.cat(hidden, dim=-1)


def _shifted(
    batch: Tensor, teacher: Tensor, step: int, anchors: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Return step's tokens [B, anchors], teacher labels [B, anchors, V] and valid mask."""
    shift = 1 + step
    available = batch.shape[1] - shift  # anchors i with token i + shift inside the window
    tokens = F.pad(batch[:, shift:], (0, anchors - available))
    labels = F.pad(teacher[:, shift:], (0, 0, 0, anchors - available))
    valid = (torch.arange(anchors, device=batch.device) < available).float().expand_as(tokens)
    return tokens, labels, valid


def _positions(batch: Tensor) -> Tensor:
    return torch.arange(batch.shape[1], device=batch.device).expand_as(batch)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def checkpoints(losses: Sequence[float]) -> dict[str, float]:
    """Return the mean loss of the 10 steps up to each checkpoint the run reached."""
    return {
        str(step): round(_mean(losses[step - 10 : step]), 5)
        for step in CHECKPOINT_STEPS
        if len(losses) >= step
    } | {"last": round(_mean(losses[-10:]), 5)}


def build_target(seeded: bool = True) -> Transformer:
    """Build the shipped target's architecture, initialised from its config's seed."""
    config = target_config(resolve_model(NAME_PREFIX + TARGET_NAME))
    model = Transformer(config)
    if seeded:
        init_weights(model, config.seed)
    return model


def build_draft(target: Transformer) -> Eagle3Draft:
    """Build the shipped draft head's architecture over target, seeded."""
    config = draft_config(resolve_model(NAME_PREFIX + DRAFT_NAME))
    head = Eagle3Draft(replace(config, max_seq_len=target.config.max_seq_len), target)
    init_weights(head, config.seed)
    return head


def run_target_phase(
    model: Transformer,
    spec: Phase,
    sources: Sequence[Tensor],
    max_steps: int | None = None,
    progress: Reporter = SILENT,
) -> list[float]:
    """Train the target for one phase; return the loss per step."""
    model.train()
    params = list(model.parameters())
    batches = iter_windows(sources, spec)
    loss_fn = lambda batch: target_loss(model, batch)  # noqa: E731
    return train_loop(params, loss_fn, batches, spec, max_steps, progress)


def run_draft_phase(
    head: Eagle3Draft,
    target: Transformer,
    spec: Phase,
    sources: Sequence[Tensor],
    max_steps: int | None = None,
    progress: Reporter = SILENT,
) -> list[float]:
    """Distil the head from the frozen target; return the loss per step."""
    target.eval().requires_grad_(False)
    head.train()
    params = list(head.parameters())  # the shared embedding and LM head stay the target's
    batches = iter_windows(sources, spec)
    loss_fn = lambda batch: draft_loss(head, target, batch, spec.unroll)  # noqa: E731
    return train_loop(params, loss_fn, batches, spec, max_steps, progress)


def eval_windows(data: Tensor, seq_len: int = 128) -> Tensor:
    """Return the first EVAL_WINDOWS consecutive windows of data, [n, seq_len]."""
    count = min(EVAL_WINDOWS, len(data) // seq_len)
    return data[: count * seq_len].view(count, seq_len)


@torch.no_grad()
def evaluate(target: Transformer, head: Eagle3Draft, data: Tensor, unroll: int) -> dict[str, Any]:
    """Return the target's eval loss and the head's per-step loss and agreement on data."""
    target.eval()
    head.eval()
    windows = eval_windows(data)
    steps = draft_steps(head, target, windows, unroll)
    return {
        "target_loss": round(float(target_loss(target, windows)), 5),
        "draft_loss": [round(float(s.loss), 5) for s in steps],
        "draft_agreement": [round(s.agreement, 4) for s in steps],
    }


def sources_of(corpus: Corpus, spec: Phase) -> list[Tensor]:
    """Return the data a phase draws its windows from."""
    subset = as_tokens(corpus.split(FINETUNE_BUCKET))
    if spec.name == "pretrain":
        return [as_tokens(corpus.split(None))]
    if spec.name == "finetune":
        return [subset]
    return [subset, as_tokens(corpus.split(None))]


def train_models(
    corpus: Corpus, recipe: Sequence[Phase], quality: bool = True, progress: Reporter = SILENT
) -> tuple[Transformer, Eagle3Draft, dict[str, Any]]:
    """Run the recipe; return the trained target, head and the training record."""
    target = build_target()
    losses: dict[str, dict[str, float]] = {}
    seconds: dict[str, float] = {}
    for spec in recipe:
        started = time.perf_counter()
        sources = sources_of(corpus, spec)
        if spec.name == "draft":
            head = build_draft(target)
            curve = run_draft_phase(head, target, spec, sources, progress=progress)
        else:
            curve = run_target_phase(target, spec, sources, progress=progress)
        losses[spec.name] = checkpoints(curve)
        seconds[spec.name] = round(time.perf_counter() - started, 1)
    eval_data = as_tokens(corpus.split(EVAL_BUCKET))
    with progress.step("evaluation and quality" if quality else "evaluation"):
        judged = evaluate(target, head, eval_data, phase("draft").unroll)
        measured = measure_quality(target.eval(), head.eval()) if quality else None
    record = {
        "python_version": corpus.python_version,
        "corpus_sha256": corpus.digest,
        "corpus_bytes": len(corpus.text),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "recipe": [asdict(spec) for spec in recipe],
        "losses": losses,
        "seconds": seconds,
        "eval": judged,
        "quality": measured,
    }
    return target, head, record


def save_models(
    target: Transformer, head: Eagle3Draft, record: dict[str, Any], out: Path
) -> list[Path]:
    """Write both models (config, weights, training record) under out; return their dirs."""
    written = []
    for name, module in ((TARGET_NAME, target), (DRAFT_NAME, head)):
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MODELS_DIR / name / CONFIG_FILE, directory / CONFIG_FILE)
        save_weights(module, directory)
        (directory / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        written.append(directory)
    return written


def scaled(recipe: Sequence[Phase], scale: float) -> list[Phase]:
    """Return the recipe with every phase's steps (and warm-up) scaled, for a quick run."""
    return [
        replace(p, steps=max(1, round(p.steps * scale)), warmup=max(1, round(p.warmup * scale)))
        for p in recipe
    ]


def run(args: argparse.Namespace) -> int:
    """Train both models with the flags in args and write them; return the exit code."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not args.scale > 0:
        raise ConfigError(f"must be > 0, got {args.scale}", field="--scale")
    torch.manual_seed(0)
    corpus = load_corpus()
    if len(corpus.text) < MIN_CORPUS_BYTES:
        raise ConfigError(
            f"{len(corpus.text)} bytes of docstrings: this Python's standard library has no "
            "sources (only compiled files?)",
            file=stdlib_root(),
            fix="train with a Python whose standard library ships its .py files",
        )
    print(
        f"corpus: Python {corpus.python_version} stdlib docstrings, {len(corpus.text)} bytes, "
        f"sha256 {corpus.digest[:16]}",
        file=sys.stderr,
    )
    recipe = scaled(RECIPE, args.scale)
    target, head, record = train_models(corpus, recipe, not args.skip_quality, stderr_reporter())
    record["command"] = "python -m perfgate.engines.embedded.train --out DIR" + (
        f" --scale {args.scale}" if args.scale != 1.0 else ""
    )
    for directory in save_models(target, head, record, args.out):
        print(f"wrote {directory}", file=sys.stderr)
    print(json.dumps(record["eval"]), file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and train; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.engines.embedded.train", description=__doc__.split("\n")[0]
    )
    add_train_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return int(error.exit_code)


if __name__ == "__main__":
    sys.exit(main())
