"""The training recipes, read without torch: their cache key and where their weights live."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.engines.embedded import recipes
from perfgate.engines.embedded.recipes import (
    LARGE,
    RECIPES,
    TINY,
    Phase,
    config_bytes,
    model_cache_root,
    recipe_cache_dir,
    recipe_key,
    train_fix,
)

from .common import server_env


def test_each_size_names_its_models_and_the_tiny_recipe_is_the_shipped_one() -> None:
    assert {size: (r.target, r.draft) for size, r in RECIPES.items()} == {
        "tiny": ("llama-tiny", "eagle3-llama-tiny"),
        "large": ("llama-large", "eagle3-llama-large"),
    }
    shipped = json.loads((recipes.MODELS_DIR / "llama-tiny" / "training.json").read_text())
    assert [Phase(**phase) for phase in shipped["recipe"]] == list(TINY.phases)
    assert not TINY.cached and LARGE.cached and LARGE.weights_dtype == "bfloat16"
    assert [(p.name, p.steps, p.lr, p.warmup, p.unroll) for p in LARGE.phases] == [
        ("pretrain", 600, 6e-4, 60, 1),
        ("finetune", 300, 3e-4, 20, 1),
        ("draft", 600, 1e-3, 60, 3),
    ]
    assert {(p.batch_size, p.seq_len, p.weight_decay) for p in LARGE.phases} == {(32, 256, 0.1)}
    assert [p.seed for p in LARGE.phases] == [p.seed for p in TINY.phases]


def test_the_key_is_stable_and_follows_the_phases_and_the_configs() -> None:
    key = recipe_key("large")
    assert len(key) == 16 and int(key, 16) >= 0
    assert recipe_key("large") == key == recipe_key("large", config_bytes(LARGE))
    assert recipe_key("tiny") != key
    for changed in (
        replace(LARGE.phases[0], lr=5e-4),
        replace(LARGE.phases[0], steps=601),
        replace(LARGE.phases[0], seed=13),
    ):
        assert recipe_key("large", phases=(changed, *LARGE.phases[1:])) != key
    target, draft = config_bytes(LARGE)
    wider = json.dumps({**json.loads(target), "ffn_dim": 6144}).encode()
    assert recipe_key("large", (wider, draft)) != key
    assert recipe_key("large", (target, draft + b" ")) != key  # the bytes, as shipped


def test_the_cache_lives_under_the_variable_else_the_xdg_cache(tmp_path: Path) -> None:
    home = Path("~").expanduser()
    assert model_cache_root({}) == home / ".cache" / "perfgate" / "models"
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert model_cache_root(xdg) == tmp_path / "xdg" / "perfgate" / "models"
    ours = {**xdg, "PERFGATE_MODEL_CACHE": str(tmp_path / "models")}
    assert recipe_cache_dir("large", environ=ours) == tmp_path / "models" / (
        f"large-{recipe_key('large')}"
    )


def test_the_fix_names_the_command_and_the_folder(tmp_path: Path) -> None:
    fix = train_fix(LARGE, tmp_path)
    assert fix == (
        "train them once on this machine: perfgate embedded train --size large --device cuda "
        f"(about {LARGE.estimated_minutes} minutes on one H200; the weights are cached in "
        f"{tmp_path})"
    )


@pytest.mark.parametrize(
    "module",
    [
        "perfgate.engines.embedded.recipes",
        "perfgate.engines.embedded.model_dirs",
        "perfgate.engines.embedded.train_args",
    ],
)
def test_the_recipes_and_the_model_finder_import_no_torch(module: str) -> None:
    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=server_env(), check=False)
    assert done.returncode == 0, f"{module} imports torch"
