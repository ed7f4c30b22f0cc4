"""Find, build and identify the embedded engine's models.

A model is a directory holding ``config.json`` (its architecture, sizes and init seed) and,
optionally, ``model.safetensors``; without weights it is initialised from the seed. Shipped
models are named HF-style, ``perfgate/<dir>`` for ``perfgate/engines/embedded/models/<dir>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from perfgate.engines.embedded.model import (
    CachedModel,
    DraftConfig,
    Eagle3Draft,
    TargetConfig,
    Transformer,
    init_weights,
)
from perfgate.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "models"
NAME_PREFIX = "perfgate/"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TARGET_ARCHITECTURE = "llama"
DRAFT_ARCHITECTURE = "eagle3"

_M = TypeVar("_M", bound=CachedModel)
_C = TypeVar("_C", TargetConfig, DraftConfig)


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


def target_config(model: ModelDir) -> TargetConfig:
    """Build a TargetConfig from a model directory's config.json."""
    _expect(model, TARGET_ARCHITECTURE)
    return _build(TargetConfig, model.config, model)


def draft_config(model: ModelDir) -> DraftConfig:
    """Build a DraftConfig from a model directory's config.json."""
    _expect(model, DRAFT_ARCHITECTURE)
    raw = {k: v for k, v in model.config.items() if k != "target"}  # "target": informational
    if "feature_layers" in raw:
        raw["feature_layers"] = tuple(raw["feature_layers"])
    return _build(DraftConfig, raw, model)


def load_target(path_or_name: str, device: torch.device, dtype: torch.dtype) -> Transformer:
    """Build the target, load or seed its weights, and allocate its caches on device."""
    model = resolve_model(path_or_name)
    transformer = Transformer(target_config(model))
    return _finish(transformer, model, device, dtype)


def load_draft(
    path_or_name: str, target: Transformer, device: torch.device, dtype: torch.dtype
) -> Eagle3Draft:
    """Build an EAGLE-3 head over target, load or seed its weights, allocate its caches."""
    model = resolve_model(path_or_name)
    config = draft_config(model)
    if config.dim != target.config.dim:
        raise ConfigError(
            f"draft dim {config.dim} differs from the target's {target.config.dim}",
            file=model.path / CONFIG_FILE,
            field="dim",
        )
    bad = [i for i in config.feature_layers if not 0 <= i <= target.config.n_layer]
    if bad:
        raise ConfigError(
            f"feature layers {bad} are outside the target's hidden states "
            f"0..{target.config.n_layer}",
            file=model.path / CONFIG_FILE,
            field="feature_layers",
        )
    # The head caches one entry per target position, so it spans the target's context.
    config = dataclasses.replace(config, max_seq_len=target.config.max_seq_len)
    return _finish(Eagle3Draft(config, target), model, device, dtype)


def model_identity(path_or_name: str) -> str:
    """Return a stable identity: the model's label and a digest of its config and weights."""
    model = resolve_model(path_or_name)
    digest = hashlib.sha256((model.path / CONFIG_FILE).read_bytes())
    if model.weights is not None:
        digest.update(b"\0")
        digest.update(model.weights.read_bytes())
    return f"{model.label}@sha256:{digest.hexdigest()[:16]}"


def save_weights(model: nn.Module, directory: Path) -> Path:
    """Write model's own parameters to directory/model.safetensors; return the file."""
    path = directory / WEIGHTS_FILE
    save_model(model, str(path))
    return path


def _finish(module: _M, model: ModelDir, device: torch.device, dtype: torch.dtype) -> _M:
    if model.weights is None:
        init_weights(module, model.config.get("seed", 0))
    else:
        try:
            load_model(module, str(model.weights), strict=True)
        except RuntimeError as error:
            raise ConfigError(
                f"weights do not fit the config ({error})".replace("\n", " "),
                file=model.weights,
            ) from error
    module.to(device=device, dtype=dtype).eval()
    module.setup_cache()
    return module


def _expect(model: ModelDir, architecture: str) -> None:
    if model.architecture != architecture:
        raise ConfigError(
            f"is a {model.architecture!r} model where a {architecture!r} model is needed",
            file=model.path,
        )


def _build(cls: type[_C], raw: dict[str, Any], model: ModelDir) -> _C:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(
            f"unknown keys {unknown}",
            file=model.path / CONFIG_FILE,
            fix=f"keys are: architecture, {', '.join(sorted(known))}",
        )
    try:
        return cls(**raw)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error), file=model.path / CONFIG_FILE) from error
