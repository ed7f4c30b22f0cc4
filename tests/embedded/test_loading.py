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
from perfgate.engines.embedded.recipes import recipe_cache_dir
from perfgate.errors import ConfigError

from .common import CPU, DRAFT, TARGET

LARGE_TARGET, LARGE_DRAFT = "perfgate/llama-large", "perfgate/eagle3-llama-large"
TRAIN_COMMAND = "perfgate embedded train --size large --device cuda"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty model cache of this test's own; returns the large recipe's folder in it."""
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(tmp_path / "models"))
    return recipe_cache_dir("large")


def _copy(name: str, into: Path) -> Path:
    """Copy a shipped model's config, not its weights, into a new directory."""
    directory = into / name.split("/")[1]
    directory.mkdir()
    shutil.copyfile(MODELS_DIR / directory.name / "config.json", directory / "config.json")
    return directory


def test_shipped_models_resolve_by_name_and_by_path(cache: Path) -> None:
    assert shipped_models() == [
        "perfgate/eagle3-llama-large",
        DRAFT,
        "perfgate/llama-large",
        TARGET,
    ]
    assert resolve_model(TARGET).weights is not None  # trained, see training.json
    assert resolve_model(LARGE_TARGET).weights is None  # trained on the machine, then cached
    by_name, by_path = resolve_model(TARGET), resolve_model(str(MODELS_DIR / "llama-tiny"))
    assert by_name.path == by_path.path and by_name.architecture == "llama"
    assert by_name.label == TARGET
    assert model_identity(TARGET).startswith(f"{TARGET}@sha256:")
    assert model_identity(TARGET) != model_identity(DRAFT)


def test_identity_follows_content(tmp_path: Path, target: Transformer) -> None:
    directory = _copy(TARGET, tmp_path)
    seeded = model_identity(str(directory))
    save_weights(target, directory)
    assert model_identity(str(directory)) != seeded
    assert model_identity(str(directory)).split("@")[1] == model_identity(TARGET).split("@")[1]


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


def test_a_recipe_trained_model_finds_its_weights_in_the_cache(cache: Path) -> None:
    seeded = model_identity(LARGE_TARGET)
    weights = cache / "llama-large" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"trained")
    for name in (LARGE_TARGET, str(MODELS_DIR / "llama-large")):
        model = resolve_model(name)
        assert (model.trained_by, model.weights) == ("large", weights)
        assert model.path == MODELS_DIR / "llama-large"  # config and tokenizer stay shipped
    trained = model_identity(LARGE_TARGET)
    assert trained != seeded and trained.startswith(f"{LARGE_TARGET}@sha256:")
    assert model_identity(LARGE_TARGET, seeded=True) == seeded
    weights.write_bytes(b"trained again")
    assert model_identity(LARGE_TARGET) not in (seeded, trained)


def test_missing_cached_weights_name_the_command_that_trains_them(
    cache: Path, target: Transformer
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_target(LARGE_TARGET, CPU, torch.bfloat16)
    message = str(caught.value)
    assert message.startswith(f"{LARGE_TARGET}: no trained weights on this machine")
    assert f"{TRAIN_COMMAND} (about 5 minutes on one H200" in message
    assert f"the weights are cached in {cache})" in message
    with pytest.raises(ConfigError, match=f"{LARGE_DRAFT}: no trained weights.*{TRAIN_COMMAND}"):
        load_draft(LARGE_DRAFT, target, CPU, torch.bfloat16)


def test_dummy_seeds_the_weights_whatever_the_folder_holds(tmp_path: Path) -> None:
    directory = _copy(TARGET, tmp_path)  # the config alone: seeded weights
    seeded = load_target(str(directory), CPU, torch.float32)
    dummy = load_target(TARGET, CPU, torch.float32, load_format="dummy")
    trained = load_target(TARGET, CPU, torch.float32)
    torch.testing.assert_close(dummy.output.weight, seeded.output.weight, rtol=0, atol=0)
    assert not torch.equal(dummy.output.weight, trained.output.weight)
    with pytest.raises(ConfigError, match="--load-format: load format 'pt'"):
        load_target(TARGET, CPU, torch.float32, load_format="pt")


def test_bfloat16_weights_load_into_any_dtype(tmp_path: Path) -> None:
    directory = _copy(TARGET, tmp_path)
    trained = load_target(TARGET, CPU, torch.float32)
    save_weights(trained.to(torch.bfloat16), directory)
    for dtype in (torch.float32, torch.bfloat16):
        loaded = load_target(str(directory), CPU, dtype)
        assert loaded.output.weight.dtype == dtype
        expected = trained.output.weight.to(dtype)
        torch.testing.assert_close(loaded.output.weight, expected, rtol=0, atol=0)
