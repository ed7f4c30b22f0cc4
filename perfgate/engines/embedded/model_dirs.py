"""The embedded engine's model directories, read without torch: find one, say its identity.

`perfgate doctor` predicts a run's fingerprint from here without loading torch; the
loaders (perfgate.engines.embedded.loading) build the models from what this finds.

A shipped model that a cached recipe trains (``recipes.py``: perfgate/llama-large and its head)
keeps its config.json in the package and finds its weights in the recipe's cache folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.engines.embedded.recipes import CONFIG_FILE as CONFIG_FILE
from perfgate.engines.embedded.recipes import MODELS_DIR as MODELS_DIR
from perfgate.engines.embedded.recipes import RECIPES, recipe_cache_dir, train_fix
from perfgate.errors import ConfigError

NAME_PREFIX = "perfgate/"
WEIGHTS_FILE = "model.safetensors"
TARGET_ARCHITECTURE = "llama"
DRAFT_ARCHITECTURE = "eagle3"
HASH_CHUNK_BYTES = 16 * 2**20
LOAD_FORMATS = ("auto", "dummy")  # SGLang's --load-format values the engine serves
# The shipped folders whose weights a recipe trains into the cache: folder -> recipe size.
CACHED_MODELS = {
    folder: size
    for size, recipe in RECIPES.items()
    if recipe.cached
    for folder in (recipe.target, recipe.draft)
}


@dataclass(frozen=True)
class ModelDir:
    path: Path
    label: str  # the shipped name ("perfgate/llama-tiny"), else the directory's name
    architecture: str
    config: dict[str, Any]  # config.json less "architecture"
    trained_by: str | None = None  # the recipe (size) whose cache holds its weights

    @property
    def weights_dir(self) -> Path:
        """Where its weights are or would be: its own folder, or its recipe's cache."""
        if self.trained_by is None:
            return self.path
        return recipe_cache_dir(self.trained_by) / self.path.name

    @property
    def weights(self) -> Path | None:
        path = self.weights_dir / WEIGHTS_FILE
        return path if path.is_file() else None

    def missing_weights(self) -> ConfigError | None:
        """The error of a recipe-trained model whose weights are not cached here, else None."""
        if self.trained_by is None or self.weights is not None:
            return None
        return ConfigError(
            "no trained weights on this machine (`--load-format dummy` seeds them instead, "
            "for speed measurements only)",
            field=self.label,
            fix=train_fix(RECIPES[self.trained_by], self.weights_dir.parent),
        )


def shipped_models() -> list[str]:
    """Return the names of the models that ship with perfgate, sorted."""
    return sorted(NAME_PREFIX + p.parent.name for p in MODELS_DIR.glob(f"*/{CONFIG_FILE}"))


def resolve_model(path_or_name: str) -> ModelDir:
    """Find a model by shipped name or directory path and read its config."""
    path = Path(path_or_name)
    label = path.name
    if path_or_name.startswith(NAME_PREFIX) and not path.is_dir():
        path, label = MODELS_DIR / path_or_name.removeprefix(NAME_PREFIX), path_or_name
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise ConfigError(
            "no such model: not a shipped name nor a directory holding config.json",
            field=path_or_name,
            fix=f"use one of {', '.join(shipped_models())} or a model directory",
        )
    try:
        raw = json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"invalid JSON ({error})", file=config_file) from error
    architecture = raw.pop("architecture", None)
    if architecture not in (TARGET_ARCHITECTURE, DRAFT_ARCHITECTURE):
        raise ConfigError(
            f"unknown architecture {architecture!r}",
            file=config_file,
            field="architecture",
            fix=f"use {TARGET_ARCHITECTURE!r} or {DRAFT_ARCHITECTURE!r}",
        )
    return ModelDir(path, label, architecture, raw, _trained_by(path))


def _trained_by(path: Path) -> str | None:
    if path.name not in CACHED_MODELS or path.resolve().parent != MODELS_DIR.resolve():
        return None
    return CACHED_MODELS[path.name]


def load_format_of(args: Sequence[str]) -> str:
    """Return the --load-format a server's flags give (the last one), "auto" without one."""
    found = "auto"
    for i, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name == "--load-format":
            found = value if equals else (args[i + 1] if i + 1 < len(args) else found)
    return found


def model_identity(path_or_name: str, seeded: bool = False) -> str:
    """Return a stable identity: the model's label and a digest of its config and weights.

    ``seeded``: the identity of the model with its weights seeded from the config (a server
    with ``--load-format dummy``), whatever weights there are.
    """
    model = resolve_model(path_or_name)
    digest = hashlib.sha256((model.path / CONFIG_FILE).read_bytes())
    if model.weights is not None and not seeded:
        digest.update(b"\0")
        with model.weights.open("rb") as weights:
            while chunk := weights.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
    return f"{model.label}@sha256:{digest.hexdigest()[:16]}"
