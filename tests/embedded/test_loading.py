"""Finding models by name or path, loading weights, and identifying them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from perfgate.engines.embedded.loading import (
    MODELS_DIR,
    load_draft,
    load_target,
    model_identity,
    resolve_model,
    save_weights,
    shipped_models,
)
from perfgate.engines.embedded.model import Transformer
from perfgate.errors import ConfigError

from .common import CPU, DRAFT, TARGET


def _copy(name: str, into: Path) -> Path:
    directory = into / name.split("/")[1]
    shutil.copytree(MODELS_DIR / directory.name, directory)
    return directory


def test_shipped_models_resolve_by_name_and_by_path() -> None:
    assert shipped_models() == [DRAFT, TARGET]
    by_name, by_path = resolve_model(TARGET), resolve_model(str(MODELS_DIR / "llama-tiny"))
    assert by_name.path == by_path.path and by_name.architecture == "llama"
    assert by_name.label == TARGET
    assert model_identity(TARGET).startswith(f"{TARGET}@sha256:")
    assert model_identity(TARGET) != model_identity(DRAFT)


def test_identity_follows_content(tmp_path: Path, target: Transformer) -> None:
    directory = _copy(TARGET, tmp_path)
    seeded = model_identity(str(directory))
    assert seeded.split("@")[1] == model_identity(TARGET).split("@")[1]  # same config
    save_weights(target, directory)
    assert model_identity(str(directory)) != seeded


def test_weights_beside_the_config_are_loaded(tmp_path: Path, target: Transformer) -> None:
    directory = _copy(TARGET, tmp_path)
    trained = load_target(TARGET, CPU, torch.float32)
    with torch.no_grad():
        trained.output.weight.mul_(2.0)
    save_weights(trained, directory)
    loaded = load_target(str(directory), CPU, torch.float32)
    torch.testing.assert_close(loaded.output.weight, trained.output.weight)
    assert not torch.equal(loaded.output.weight, target.output.weight)


def test_draft_weights_exclude_the_shared_modules(tmp_path: Path, target: Transformer) -> None:
    directory = _copy(DRAFT, tmp_path)
    head = load_draft(DRAFT, target, CPU, torch.float32)
    save_weights(head, directory)
    loaded = load_draft(str(directory), target, CPU, torch.float32)
    torch.testing.assert_close(loaded.fc.weight, head.fc.weight)


def test_unknown_model_names_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="perfgate/llama-tiny") as caught:
        resolve_model("perfgate/llama-huge")
    assert "perfgate/llama-huge" in str(caught.value)


def test_a_draft_is_not_a_target(target: Transformer) -> None:
    with pytest.raises(ConfigError, match="'eagle3' model where a 'llama' model is needed"):
        load_target(DRAFT, CPU, torch.float32)
    with pytest.raises(ConfigError, match="'llama' model where a 'eagle3' model is needed"):
        load_draft(TARGET, target, CPU, torch.float32)


def test_config_mistakes_say_which_key(tmp_path: Path, target: Transformer) -> None:
    directory = _copy(DRAFT, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "n_layers": 2}))
    with pytest.raises(ConfigError, match=r"unknown keys \['n_layers'\]"):
        load_draft(str(directory), target, CPU, torch.float32)
    (directory / "config.json").write_text(json.dumps({**config, "feature_layers": [1, 2, 9]}))
    with pytest.raises(ConfigError, match=r"feature layers \[9\]"):
        load_draft(str(directory), target, CPU, torch.float32)
