"""Train the shipped models: ``python -m perfgate.engines.embedded.train --size {tiny,large}``.

Two recipes (``recipes.py``): ``tiny`` trains perfgate/llama-tiny and its head on the CPU in
fp32, written where ``--out`` says (the package ships them); ``large`` trains perfgate/llama-large
and its head on one GPU, in bf16 autocast over fp32 master weights, and writes them, in bfloat16,
into the machine's model cache, where the engine finds them. Each recipe, on the stdlib
docstrings (``corpus.py``), byte-level:

1. ``pretrain``: the target learns the whole corpus (next-byte cross-entropy).
2. ``finetune``: the target learns a small subset by heart. A small model trained only on the
   broad corpus decodes greedily into loops ("of the command line of the command line ...");
   a model that has memorised some text continues a prompt with varied text instead.
3. ``draft``: the EAGLE-3 head is distilled from the frozen target: on each window it reads the
   target's low/mid/high features and learns the target's next-token distribution, unrolled
   over ``unroll`` steps that feed the head its own output hidden state, as it runs when
   drafting (EAGLE-3's training-time test).

Each phase draws its windows from a generator seeded by the recipe, so a run is reproducible
up to floating-point reduction order (the head's attention trains on PyTorch's math backend,
``losses.HEAD_ATTENTION``, since CUDA's memory-efficient backward is not deterministic);
``training.json`` beside the weights records the corpus
(Python version, digest), the recipe and its cache key, the device, every step's loss and
its means at checkpoints, the seconds per phase and in all, the evaluation and the accept
lengths of the saved weights.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
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
    WEIGHTS_FILE,
    ModelDir,
    draft_config,
    save_weights,
    target_config,
)
from perfgate.engines.embedded.losses import draft_loss, draft_steps, target_loss
from perfgate.engines.embedded.model import (
    DraftConfig,
    Eagle3Draft,
    TargetConfig,
    Transformer,
    init_weights,
)
from perfgate.engines.embedded.recipes import (
    CACHE_VARIABLE,
    RECIPES,
    TINY,
    Phase,
    Recipe,
    config_bytes,
    recipe_cache_dir,
    recipe_key,
)
from perfgate.engines.embedded.train_args import add_train_arguments
from perfgate.errors import ConfigError
from perfgate.progress import SILENT, Reporter, stderr_reporter

TARGET_NAME = TINY.target
DRAFT_NAME = TINY.draft
RECORD_FILE = "training.json"
CHECKPOINT_STEPS = (10, 20, 30, 100)  # mean loss of the 10 steps up to each is recorded
SHOWN_LOSS_STEPS = 20  # progress shows the mean loss of this many steps: one step's is noisy
EVAL_WINDOWS = 64
MIN_CORPUS_BYTES = 500_000  # the stdlib's docstrings are about 1.6 MB
CPU = torch.device("cpu")
WEIGHTS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
AUTOCAST_DTYPE = torch.bfloat16  # forward and loss on CUDA; weights and AdamW stay fp32

RECIPE: tuple[Phase, ...] = TINY.phases  # the shipped tiny models' recipe


def phase(name: str) -> Phase:
    """Return the tiny recipe's phase called name."""
    return TINY.phase(name)


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
    autocast: bool = False,
) -> list[float]:
    """Run AdamW over the phase's steps (or the first max_steps); return the loss per step.

    ``autocast``: run the loss in bf16 autocast on the batches' device; the parameters, their
    gradients and AdamW's state stay in their own dtype (fp32).
    """
    optimizer = torch.optim.AdamW(
        params, lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay
    )
    losses: list[float] = []
    steps = spec.steps if max_steps is None else min(max_steps, spec.steps)
    with progress.step(spec.name, total=steps, unit="step") as shown:
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, spec)
            batch = next(batches)
            with torch.autocast(batch.device.type, AUTOCAST_DTYPE, enabled=autocast):
                loss = loss_fn(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
            shown.advance(lambda: f"loss {_mean(losses[-SHOWN_LOSS_STEPS:]):.4f}")
    return losses


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def checkpoints(losses: Sequence[float]) -> dict[str, float]:
    """Return the mean loss of the 10 steps up to each checkpoint the run reached."""
    return {
        str(step): round(_mean(losses[step - 10 : step]), 5)
        for step in CHECKPOINT_STEPS
        if len(losses) >= step
    } | {"last": round(_mean(losses[-10:]), 5)}


def model_configs(
    recipe: Recipe, configs: tuple[bytes, bytes] | None = None
) -> tuple[TargetConfig, DraftConfig]:
    """Return the recipe's target and head configs, from config.json bytes (default: shipped)."""
    texts = config_bytes(recipe) if configs is None else configs
    found = []
    for name, text in zip((recipe.target, recipe.draft), texts, strict=True):
        raw = json.loads(text)
        architecture = raw.pop("architecture", None)
        found.append(ModelDir(MODELS_DIR / name, NAME_PREFIX + name, architecture, raw))
    return target_config(found[0]), draft_config(found[1])


def build_target(
    seeded: bool = True, config: TargetConfig | None = None, device: torch.device = CPU
) -> Transformer:
    """Build a target (default: the tiny one) on device, initialised from its config's seed."""
    config = config or model_configs(TINY)[0]
    with device:
        model = Transformer(config)
    if seeded:
        init_weights(model, config.seed)
    return model


def build_draft(target: Transformer, config: DraftConfig | None = None) -> Eagle3Draft:
    """Build a draft head (default: the tiny one) over target, on its device, seeded."""
    config = config or model_configs(TINY)[1]
    with target.output.weight.device:
        head = Eagle3Draft(replace(config, max_seq_len=target.config.max_seq_len), target)
    init_weights(head, config.seed)
    return head


def run_target_phase(
    model: Transformer,
    spec: Phase,
    sources: Sequence[Tensor],
    max_steps: int | None = None,
    progress: Reporter = SILENT,
    autocast: bool = False,
) -> list[float]:
    """Train the target for one phase; return the loss per step."""
    model.train()
    params = list(model.parameters())
    batches = _on(params[0].device, iter_windows(sources, spec))
    loss_fn = lambda batch: target_loss(model, batch)  # noqa: E731
    return train_loop(params, loss_fn, batches, spec, max_steps, progress, autocast)


def run_draft_phase(
    head: Eagle3Draft,
    target: Transformer,
    spec: Phase,
    sources: Sequence[Tensor],
    max_steps: int | None = None,
    progress: Reporter = SILENT,
    autocast: bool = False,
) -> list[float]:
    """Distil the head from the frozen target; return the loss per step."""
    target.eval().requires_grad_(False)
    head.train()
    params = list(head.parameters())  # the shared embedding and LM head stay the target's
    batches = _on(params[0].device, iter_windows(sources, spec))
    loss_fn = lambda batch: draft_loss(head, target, batch, spec.unroll)  # noqa: E731
    return train_loop(params, loss_fn, batches, spec, max_steps, progress, autocast)


def _on(device: torch.device, batches: Iterator[Tensor]) -> Iterator[Tensor]:
    """The batches (drawn on the CPU, as on every device) moved to device."""
    return (batch.to(device, non_blocking=True) for batch in batches)


def eval_windows(data: Tensor, seq_len: int = 128) -> Tensor:
    """Return the first EVAL_WINDOWS consecutive windows of data, [n, seq_len]."""
    count = min(EVAL_WINDOWS, len(data) // seq_len)
    return data[: count * seq_len].view(count, seq_len)


@torch.no_grad()
def evaluate(
    target: Transformer, head: Eagle3Draft, data: Tensor, unroll: int, autocast: bool = False
) -> dict[str, Any]:
    """Return the target's eval loss and the head's per-step loss and agreement on data."""
    target.eval()
    head.eval()
    windows = eval_windows(data).to(target.output.weight.device)
    with torch.autocast(windows.device.type, AUTOCAST_DTYPE, enabled=autocast):
        steps = draft_steps(head, target, windows, unroll)
        target_eval_loss = target_loss(target, windows)
    return {
        "target_loss": round(float(target_eval_loss), 5),
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
    corpus: Corpus,
    recipe: Sequence[Phase],
    quality: bool = True,
    progress: Reporter = SILENT,
    *,
    size: str = "tiny",
    device: torch.device = CPU,
    configs: tuple[bytes, bytes] | None = None,
) -> tuple[Transformer, Eagle3Draft, dict[str, Any]]:
    """Run the phases of size's recipe on device; return the target, head and training record.

    On CUDA the forward and loss run in bf16 autocast. The returned models are in the recipe's
    weights dtype, the quality measured in it; ``configs`` (target, head config.json bytes)
    replaces the shipped architectures, for a quick run of a recipe at a smaller size.
    """
    spec_of = RECIPES[size]
    autocast = device.type == "cuda"
    began = time.perf_counter()
    target, head, curves, seconds = run_phases(
        corpus, recipe, model_configs(spec_of, configs), device, progress
    )
    eval_data = as_tokens(corpus.split(EVAL_BUCKET))
    unroll = next(p.unroll for p in recipe if p.name == "draft")
    dtype = WEIGHTS_DTYPES[spec_of.weights_dtype]
    with progress.step("evaluation and quality" if quality else "evaluation"):
        judged = evaluate(target, head, eval_data, unroll, autocast)
        target.to(dtype).requires_grad_(False)
        head.to(dtype).requires_grad_(False)
        measured = measure_quality(target.eval(), head.eval()) if quality else None
    seconds["total"] = round(time.perf_counter() - began, 1)
    record = {
        "size": size,
        "recipe_key": recipe_key(size, configs, recipe),
        "python_version": corpus.python_version,
        "corpus_sha256": corpus.digest,
        "corpus_bytes": len(corpus.text),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "device": device_name(device),
        "autocast": str(AUTOCAST_DTYPE).removeprefix("torch.") if autocast else None,
        "dtype": spec_of.weights_dtype,
        "recipe": [asdict(spec) for spec in recipe],
        "losses": {name: checkpoints(curve) for name, curve in curves.items()},
        "seconds": seconds,
        "loss_curves": curves,  # every step's loss: two runs compare step by step
        "eval": judged,
        "quality": measured,
    }
    return target, head, record


def run_phases(
    corpus: Corpus,
    recipe: Sequence[Phase],
    configs: tuple[TargetConfig, DraftConfig],
    device: torch.device,
    progress: Reporter = SILENT,
) -> tuple[Transformer, Eagle3Draft, dict[str, list[float]], dict[str, float]]:
    """Build and train the target, then the head, on device (bf16 autocast on CUDA).

    Returns both models, each phase's loss per step and each phase's seconds.
    """
    autocast = device.type == "cuda"
    target = build_target(config=configs[0], device=device)
    head = None  # built over the trained target
    curves: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    for spec in recipe:
        started = time.perf_counter()
        sources = sources_of(corpus, spec)
        if spec.name == "draft":
            head = build_draft(target, configs[1])
            curve = run_draft_phase(head, target, spec, sources, None, progress, autocast)
        else:
            curve = run_target_phase(target, spec, sources, None, progress, autocast)
        curves[spec.name] = curve
        seconds[spec.name] = round(time.perf_counter() - started, 1)
    if head is None:
        raise ConfigError("has no draft phase", field="recipe", fix="end it with a draft phase")
    return target, head, curves, seconds


def device_name(device: torch.device) -> str:
    """Name the device trained on: the GPU's model, else the CPU's architecture."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return f"cpu ({platform.machine()})"


def save_models(
    target: Transformer,
    head: Eagle3Draft,
    record: dict[str, Any],
    out: Path,
    recipe: Recipe = TINY,
    configs: tuple[bytes, bytes] | None = None,
) -> list[Path]:
    """Write both models (config, weights, training record) under out; return their dirs."""
    written = []
    texts = config_bytes(recipe) if configs is None else configs
    for name, module, text in zip(
        (recipe.target, recipe.draft), (target, head), texts, strict=True
    ):
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_bytes(text)
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


def cached_models(directory: Path, recipe: Recipe) -> bool:
    """Whether directory holds both of the recipe's models with their weights."""
    return all(
        (directory / name / WEIGHTS_FILE).is_file() for name in (recipe.target, recipe.draft)
    )


@contextlib.contextmanager
def staged(final: Path) -> Iterator[Path]:
    """Yield a new folder beside final; when the block ends without error, it becomes final.

    An interrupted run leaves at most a hidden ``.<name>.*`` folder beside final, never a
    half-written final: the loader finds either the old models or the new ones.
    """
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    except OSError as error:
        raise ConfigError(
            f"cannot write the model cache here ({error.strerror or error})",
            file=final.parent,
            fix=f"set {CACHE_VARIABLE} to a folder this user can write, or pass --out DIR",
        ) from error
    try:
        yield work
        work.chmod(0o755)
        old = None
        if final.exists():
            old = final.with_name(f"{work.name}.old")
            final.rename(old)
        work.rename(final)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def training_device(name: str) -> torch.device:
    """Return the device for --device, refusing cuda where torch sees none."""
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "cuda: no CUDA device is visible to torch",
                field="--device",
                fix="train on a machine with a GPU, or pass --device cpu (the large recipe "
                "then takes many hours)",
            )
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return torch.device(name)


def destination(args: argparse.Namespace, recipe: Recipe) -> Path | None:
    """Where the run writes its models; None: they are cached already and --force is unset."""
    if args.out is not None:
        try:  # before training, not after it
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(
                f"{args.out}: cannot create it ({error.strerror or error})",
                field="--out",
                fix="pass a folder this user can write",
            ) from error
        return Path(args.out)
    if not recipe.cached:
        raise ConfigError(
            f"is required with --size {recipe.size}: its weights ship in the package",
            field="--out",
            fix="pass --out DIR (perfgate/engines/embedded/models replaces the shipped ones)",
        )
    if args.scale != 1.0:
        raise ConfigError(
            f"{args.scale}: a scaled run is not the recipe the model cache holds",
            field="--scale",
            fix="pass --out DIR to write a scaled run elsewhere, or leave --scale out",
        )
    cache = recipe_cache_dir(recipe.size)
    if cached_models(cache, recipe) and not args.force:
        return None
    return cache


def load_training_corpus() -> Corpus:
    """Return the corpus, refusing a standard library without sources."""
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
    return corpus


def run(args: argparse.Namespace) -> int:
    """Train both models of --size with the flags in args and write them; return the exit code."""
    recipe = RECIPES[args.size]
    if not args.scale > 0:
        raise ConfigError(f"must be > 0, got {args.scale}", field="--scale")
    out = destination(args, recipe)
    if out is None:
        cache = recipe_cache_dir(recipe.size)
        print(
            f"the {recipe.size} models are trained and cached already: {cache} "
            f"({recipe.target}, {recipe.draft}); pass --force to train them again",
            file=sys.stderr,
        )
        return 0
    device = training_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    phases = scaled(recipe.phases, args.scale)
    quality = not args.skip_quality
    with staged(out) if args.out is None else contextlib.nullcontext(out) as where:
        corpus = load_training_corpus()
        record = train_into(where, corpus, recipe, phases, device, quality, command_line(args))
    for name in (recipe.target, recipe.draft):
        print(f"wrote {out / name}", file=sys.stderr)
    seconds = record["seconds"]
    print(f"trained on {record['device']} in {seconds['total']} s: {seconds}", file=sys.stderr)
    print(json.dumps(record["eval"]), file=sys.stderr)
    if record["quality"] is not None:
        accepted = record["quality"]["accept_length_by_steps"]
        print(f"accept length by steps: {json.dumps(accepted)}", file=sys.stderr)
    return 0


def train_into(
    out: Path,
    corpus: Corpus,
    recipe: Recipe,
    phases: Sequence[Phase],
    device: torch.device,
    quality: bool = True,
    command: str | None = None,
    configs: tuple[bytes, bytes] | None = None,
    progress: Reporter | None = None,
) -> dict[str, Any]:
    """Train the recipe's models with phases and write them under out; return the record.

    ``command``, the command line that reproduces the run, joins the record.
    """
    target, head, record = train_models(
        corpus,
        phases,
        quality,
        stderr_reporter() if progress is None else progress,
        size=recipe.size,
        device=device,
        configs=configs,
    )
    record["command"] = command
    save_models(target, head, record, out, recipe, configs)
    return record


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run, for training.json."""
    words = ["perfgate embedded train", f"--size {args.size}", f"--device {args.device}"]
    if args.out is not None:
        words.append("--out DIR")
    if args.scale != 1.0:
        words.append(f"--scale {args.scale}")
    return " ".join(words)


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
