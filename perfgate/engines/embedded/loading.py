"""Find, build and identify the embedded engine's models.

A model is a directory holding ``config.json`` (its architecture, sizes and init seed) and,
optionally, ``model.safetensors``; without weights it is initialised from the seed. Shipped
models are named HF-style, ``perfgate/<dir>`` for ``perfgate/engines/embedded/models/<dir>``;
those a cached recipe trains (``recipes.py``) load their weights from the cache, and refuse to
load without them unless ``load_format`` is ``"dummy"`` (SGLang's ``--load-format dummy``:
seeded weights, for speed measurements).
"""

from __future__ import annotations

import dataclasses
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
from perfgate.engines.embedded.model_dirs import (  # found without torch; named here too
    CONFIG_FILE as CONFIG_FILE,
)
from perfgate.engines.embedded.model_dirs import DRAFT_ARCHITECTURE as DRAFT_ARCHITECTURE
from perfgate.engines.embedded.model_dirs import LOAD_FORMATS as LOAD_FORMATS
from perfgate.engines.embedded.model_dirs import MODELS_DIR as MODELS_DIR
from perfgate.engines.embedded.model_dirs import NAME_PREFIX as NAME_PREFIX
from perfgate.engines.embedded.model_dirs import TARGET_ARCHITECTURE as TARGET_ARCHITECTURE
from perfgate.engines.embedded.model_dirs import WEIGHTS_FILE as WEIGHTS_FILE
from perfgate.engines.embedded.model_dirs import ModelDir as ModelDir
from perfgate.engines.embedded.model_dirs import model_identity as model_identity
from perfgate.engines.embedded.model_dirs import resolve_model as resolve_model
from perfgate.engines.embedded.model_dirs import shipped_models as shipped_models
from perfgate.errors import ConfigError

_M = TypeVar("_M", bound=CachedModel)
_C = TypeVar("_C", TargetConfig, DraftConfig)


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


def load_target(
    path_or_name: str, device: torch.device, dtype: torch.dtype, load_format: str = "auto"
) -> Transformer:
    """Build the target, load or seed its weights, and allocate its caches on device.

    ``load_format`` "dummy" seeds the weights whatever the folder holds.
    """
    model = resolve_loadable(path_or_name, load_format)
    with device:  # built where it runs: a large model's default init is slow on a CPU
        transformer = Transformer(target_config(model))
    return _finish(transformer, model, device, dtype, load_format)


def load_draft(
    path_or_name: str,
    target: Transformer,
    device: torch.device,
    dtype: torch.dtype,
    load_format: str = "auto",
) -> Eagle3Draft:
    """Build an EAGLE-3 head over target, load or seed its weights, allocate its caches."""
    model = resolve_loadable(path_or_name, load_format)
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
    with device:
        head = Eagle3Draft(config, target)
    return _finish(head, model, device, dtype, load_format)


def save_weights(model: nn.Module, directory: Path) -> Path:
    """Write model's own parameters, in their dtype, to directory/model.safetensors.

    Returns the file. Loading casts them to the dtype the engine runs in.
    """
    path = directory / WEIGHTS_FILE
    save_model(model, str(path))
    return path


def resolve_loadable(path_or_name: str, load_format: str) -> ModelDir:
    """Find the model; refuse a recipe-trained one whose weights are not cached here."""
    if load_format not in LOAD_FORMATS:
        raise ConfigError(
            f"load format {load_format!r}", field="--load-format", fix=f"use {LOAD_FORMATS}"
        )
    model = resolve_model(path_or_name)
    missing = model.missing_weights()
    if missing is not None and load_format != "dummy":
        raise missing
    return model


def _seeded(model: ModelDir, load_format: str) -> bool:
    return model.weights is None or load_format == "dummy"


def _finish(
    module: _M, model: ModelDir, device: torch.device, dtype: torch.dtype, load_format: str
) -> _M:
    """Seed or load the weights of a module built on device; allocate its caches.

    A seeded model is initialised in fp32 where it runs, then cast: its values depend on the
    device's generator (the same on every CPU, not the same on CPU and CUDA). Weights are
    copied into a module already in dtype: the same values as loading then casting, without
    an fp32 copy of a large model.
    """
    if _seeded(model, load_format):
        init_weights(module, model.config.get("seed", 0))
        module.to(dtype=dtype)
    else:
        assert model.weights is not None
        module.to(dtype=dtype)
        try:
            load_model(module, str(model.weights), strict=True, device=str(device))
        except RuntimeError as error:
            raise ConfigError(
                f"weights do not fit the config ({error})".replace("\n", " "),
                file=model.weights,
            ) from error
    module.eval()
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
