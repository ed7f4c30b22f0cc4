"""The embedded engine's model directories, read without torch: find one, say its identity.

`perfgate doctor` predicts a run's fingerprint from here without loading torch; the
loaders (perfgate.engines.embedded.loading) build the models from what this finds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "models"
NAME_PREFIX = "perfgate/"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TARGET_ARCHITECTURE = "llama"
DRAFT_ARCHITECTURE = "eagle3"


@dataclass(frozen=True)
class ModelDir:
    path: Path
    label: str  # the shipped name ("perfgate/llama-tiny"), else the directory's name
    architecture: str
    config: dict[str, Any]  # config.json less "architecture"

    @property
    def weights(self) -> Path | None:
        path = self.path / WEIGHTS_FILE
        return path if path.is_file() else None


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
    return ModelDir(path, label, architecture, raw)


def model_identity(path_or_name: str) -> str:
    """Return a stable identity: the model's label and a digest of its config and weights."""
    model = resolve_model(path_or_name)
    digest = hashlib.sha256((model.path / CONFIG_FILE).read_bytes())
    if model.weights is not None:
        digest.update(b"\0")
        digest.update(model.weights.read_bytes())
    return f"{model.label}@sha256:{digest.hexdigest()[:16]}"
