"""The training recipes of the shipped models, and where a recipe's weights are cached.

Read without torch: `perfgate doctor` and the model finder (``model_dirs.py``) ask here which
shipped models a recipe trains, under which key their weights are cached, and what command
makes them. ``train.py`` runs the recipes.

The tiny models' weights ship in the package. The large models' weights (2.6 GB in bfloat16)
do not: each machine trains them once and caches them under
``$PERFGATE_MODEL_CACHE`` (default ``${XDG_CACHE_HOME:-~/.cache}/perfgate/models``), in
``<size>-<key>/``, where the key digests the recipe's phases and the two models' config.json, so
a changed recipe or architecture never reads weights trained by another.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

MODELS_DIR = Path(__file__).parent / "models"  # the shipped models' folders
CONFIG_FILE = "config.json"
CACHE_VARIABLE = "PERFGATE_MODEL_CACHE"
KEY_FORMAT = 1  # bump when what the key digests changes meaning
TRAIN_COMMAND = "perfgate embedded train"


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


@dataclass(frozen=True)
class Recipe:
    """How one size's target and EAGLE-3 head are trained, and where the weights live.

    ``cached``: the weights are trained on each machine and cached (see the module's
    docstring), not shipped. ``device`` is where the recipe is meant to run, and
    ``estimated_minutes`` the time it was sized for there: an estimate, the measured seconds
    go to ``training.json``.
    """

    size: str
    target: str  # the shipped target's folder under models/
    draft: str  # the shipped EAGLE-3 head's folder
    phases: tuple[Phase, ...]
    cached: bool
    device: str
    estimated_minutes: int
    weights_dtype: str  # what the weights are saved in

    def phase(self, name: str) -> Phase:
        """Return the phase called name."""
        return next(p for p in self.phases if p.name == name)


TINY = Recipe(
    "tiny",
    "llama-tiny",
    "eagle3-llama-tiny",
    (
        Phase("pretrain", steps=1000, lr=3e-3, warmup=100, seed=10),
        Phase("finetune", steps=400, lr=1e-3, warmup=20, seed=11),
        Phase("draft", steps=1000, lr=3e-3, warmup=100, seed=12, unroll=3),
    ),
    cached=False,
    device="cpu",
    estimated_minutes=20,  # measured: about 20 minutes on 2 cores (training.json's seconds)
    weights_dtype="float32",
)

# Sized for one H200 in bf16 autocast: 6 x 1.23e9 parameters x 8192 tokens = 6e13 FLOP a
# target step, 900 of them and the head's 600 cheaper ones in about 5 minutes. Timed: 294 s
# for the command on an H200 (benchmarks/results/h200-real-weights.md), 333-338 s on H100s
# (h100-training-repeats.md).
LARGE = Recipe(
    "large",
    "llama-large",
    "eagle3-llama-large",
    (
        Phase("pretrain", steps=600, lr=6e-4, warmup=60, seq_len=256, seed=10),
        Phase("finetune", steps=300, lr=3e-4, warmup=20, seq_len=256, seed=11),
        Phase("draft", steps=600, lr=1e-3, warmup=60, seq_len=256, seed=12, unroll=3),
    ),
    cached=True,
    device="cuda",
    estimated_minutes=5,  # measured: 281-283 s of training on an H200 (h200-real-weights.md)
    weights_dtype="bfloat16",
)

RECIPES: Mapping[str, Recipe] = {recipe.size: recipe for recipe in (TINY, LARGE)}


def config_bytes(recipe: Recipe, models_dir: Path = MODELS_DIR) -> tuple[bytes, bytes]:
    """Return the config.json bytes of the recipe's shipped target and head."""
    return tuple(  # type: ignore[return-value]
        (models_dir / name / CONFIG_FILE).read_bytes() for name in (recipe.target, recipe.draft)
    )


def recipe_key(
    size: str, configs: tuple[bytes, bytes] | None = None, phases: Sequence[Phase] | None = None
) -> str:
    """Return the cache key of a recipe: 16 hex digits over its phases and models' configs.

    ``configs`` (target, head config.json bytes) defaults to the shipped models', ``phases``
    to the recipe's. The corpus is not in the key: ``training.json`` records which one the
    weights were trained on.
    """
    recipe = RECIPES[size]
    digest = hashlib.sha256(f"perfgate recipe key {KEY_FORMAT}\0{size}\0".encode())
    steps = [asdict(p) for p in (recipe.phases if phases is None else phases)]
    digest.update(json.dumps(steps, sort_keys=True).encode())
    for text in configs if configs is not None else config_bytes(recipe):
        digest.update(b"\0")
        digest.update(text)
    return digest.hexdigest()[:16]


def model_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """Return the folder every recipe's cached weights live under."""
    environ = os.environ if environ is None else environ
    if environ.get(CACHE_VARIABLE):
        return Path(environ[CACHE_VARIABLE]).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "perfgate" / "models"


def recipe_cache_dir(
    size: str,
    configs: tuple[bytes, bytes] | None = None,
    phases: Sequence[Phase] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Return the folder of a recipe's cached models: ``<root>/<size>-<key>``."""
    return model_cache_root(environ) / f"{size}-{recipe_key(size, configs, phases)}"


def train_command(recipe: Recipe) -> str:
    """Return the command that trains a recipe's models into the cache."""
    return f"{TRAIN_COMMAND} --size {recipe.size} --device {recipe.device}"


def train_fix(recipe: Recipe, cache_dir: Path) -> str:
    """Return what to do when a recipe's cached weights are missing."""
    device = "one H200" if recipe.device == "cuda" else "the CPU"
    return (
        f"train them once on this machine: {train_command(recipe)} (about "
        f"{recipe.estimated_minutes} minutes on {device}; the weights are cached in {cache_dir})"
    )
