"""The large recipe, shrunk to run on a CPU: it trains, fills the model cache, loads and serves.

The GPU run is the same code with ``--device cuda`` (bf16 autocast); here the phases are scaled
down (``--scale``), their batches cut, and the architecture shrunk through the configs
``train_models`` takes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from perfgate.cli import main as cli_main
from perfgate.engines.embedded import train
from perfgate.engines.embedded.corpus import Corpus
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.recipes import LARGE, recipe_cache_dir, recipe_key
from perfgate.engines.launch import free_port
from perfgate.errors import ConfigError
from perfgate.progress import SILENT

from ..hang import HANG_S
from .common import CPU, DRAFT, SERVER_MODULE, TARGET, server_env, serving

SCALE = 0.005  # 3, 2 and 3 steps
# Batches of 8 x 256 bytes, not the recipe's 32: a third of the training's CPU time, and each
# step runs the same code (the record, the cache key and the comparisons cover the batch size).
PHASES = [replace(p, batch_size=8) for p in train.scaled(LARGE.phases, SCALE)]
SMALL_TARGET = {
    "architecture": "llama",
    "vocab_size": 256,
    "n_layer": 3,
    "dim": 64,
    "n_head": 4,
    "ffn_dim": 128,
    "max_seq_len": 512,
    "rope_base": 10000.0,
    "norm_eps": 1e-05,
    "tie_embeddings": False,
    "seed": 0,
}
SMALL_DRAFT = {
    "architecture": "eagle3",
    "target": "perfgate/llama-large",
    "dim": 64,
    "n_head": 4,
    "ffn_dim": 128,
    "feature_layers": [1, 2, 3],
    "max_seq_len": 512,
    "rope_base": 10000.0,
    "norm_eps": 1e-05,
    "seed": 1,
}
CONFIGS = (json.dumps(SMALL_TARGET).encode(), json.dumps(SMALL_DRAFT).encode())


def _train_small(out: Path, corpus: Corpus, quality: bool = False) -> dict[str, Any]:
    return train.train_into(out, corpus, LARGE, PHASES, CPU, quality, "test", CONFIGS, SILENT)


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, corpus: Corpus
) -> tuple[Path, dict[str, Any]]:
    """The shrunk large recipe, trained into a model cache of its own."""
    root = tmp_path_factory.mktemp("models")
    cache = recipe_cache_dir("large", CONFIGS, PHASES, {"PERFGATE_MODEL_CACHE": str(root)})
    with train.staged(cache) as work:
        record = _train_small(work, corpus, quality=True)
    return cache, record


@pytest.mark.slow  # trains the shrunk large recipe and measures it (about 15 s)
def test_the_run_fills_the_cache_with_bfloat16_weights_and_its_record(
    trained: tuple[Path, dict[str, Any]],
) -> None:
    cache, record = trained
    assert cache.name == f"large-{recipe_key('large', CONFIGS, PHASES)}"
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name]  # no staging left
    for name, config in zip((LARGE.target, LARGE.draft), CONFIGS, strict=True):
        folder = cache / name
        assert sorted(p.name for p in folder.iterdir()) == [
            "config.json",
            "model.safetensors",
            "training.json",
        ]
        assert (folder / "config.json").read_bytes() == config
        with safe_open(str(folder / "model.safetensors"), "pt") as weights:
            dtypes = {weights.get_tensor(key).dtype for key in weights.keys()}  # noqa: SIM118
        assert dtypes == {torch.bfloat16}
        assert json.loads((folder / "training.json").read_text()) == record
    assert (record["size"], record["recipe_key"], record["dtype"]) == (
        "large",
        cache.name.removeprefix("large-"),
        "bfloat16",
    )
    assert record["device"].startswith("cpu") and record["autocast"] is None
    assert record["recipe"][0]["steps"] == 3 and record["command"] == "test"
    assert record["recipe"] == [asdict(p) for p in PHASES]
    assert set(record["seconds"]) == {"pretrain", "finetune", "draft", "total"}
    assert [len(record["loss_curves"][p.name]) for p in PHASES] == [p.steps for p in PHASES]
    accepted = record["quality"]["accept_length_by_steps"]  # measured in bfloat16, as saved
    assert list(accepted) == ["1", "2", "3", "4", "5", "6"]
    assert all(1.0 <= accepted[str(s)] <= s + 1 for s in range(1, 7))


@pytest.mark.slow  # trains the shrunk large recipe, then serves it
def test_the_cached_models_load_and_serve(
    trained: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    cache, _ = trained
    target = load_target(str(cache / LARGE.target), CPU, torch.bfloat16)
    head = load_draft(str(cache / LARGE.draft), target, CPU, torch.bfloat16)
    assert target.config.n_layer == 3 and head.config.feature_layers == (1, 2, 3)
    flags = (
        *("--model-path", str(cache / LARGE.target)),
        *("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2"),
        *("--speculative-draft-model-path", str(cache / LARGE.draft), "--dtype", "bfloat16"),
    )
    with serving(flags, tmp_path / "server.log") as client:
        body = {"text": "Return the", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        answer = client.post("/generate", json=body).json()
        assert len(answer["output_ids"]) == 8 and answer["meta_info"]["spec_verify_ct"] >= 1


@pytest.mark.slow  # trains the shrunk large recipe a second time
def test_the_same_recipe_gives_the_same_loss_curve_on_the_cpu(
    trained: tuple[Path, dict[str, Any]], tmp_path: Path, corpus: Corpus
) -> None:
    """The module's training again, in another folder and without its quality measurement:
    the same curves, scores and weights, byte for byte."""
    cache, first = trained
    second = _train_small(tmp_path, corpus)
    assert first["loss_curves"] == second["loss_curves"]
    assert first["eval"] == second["eval"]
    for name in (LARGE.target, LARGE.draft):
        again = (tmp_path / name / "model.safetensors").read_bytes()
        assert (cache / name / "model.safetensors").read_bytes() == again


@pytest.mark.slow
def test_training_autocasts_to_bfloat16_where_asked() -> None:
    config, _ = train.model_configs(LARGE, CONFIGS)
    spec = PHASES[0]
    data = [train.as_tokens(bytes(range(256)) * 40)]
    seen: list[torch.dtype] = []
    for autocast in (False, True):
        model = train.build_target(config=config)
        handle = model.output.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
        losses = train.run_target_phase(model, spec, data, 2, autocast=autocast)
        handle.remove()
        assert all(torch.isfinite(torch.tensor(losses)))
        assert model.output.weight.dtype == torch.float32  # the master weights
    assert seen == [torch.float32] * 2 + [torch.bfloat16] * 2


def test_cached_models_are_not_trained_again_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(tmp_path))
    cache = recipe_cache_dir("large")
    for name in (LARGE.target, LARGE.draft):
        (cache / name).mkdir(parents=True)
        (cache / name / "model.safetensors").write_bytes(b"trained before")
    assert cli_main(["embedded", "train", "--size", "large", "--device", "cuda"]) == 0
    err = capsys.readouterr().err
    assert f"the large models are trained and cached already: {cache}" in err
    assert "pass --force to train them again" in err and "corpus:" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--size", "tiny"], "--out: is required with --size tiny"),
        (["--size", "large", "--scale", "0.5"], "--scale: 0.5: a scaled run is not the recipe"),
        (["--size", "large", "--scale", "0"], "--scale: must be > 0, got 0.0"),
    ],
)
def test_flag_mistakes_name_the_flag(
    flags: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(tmp_path))
    assert train.main(flags) == 64
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_cache_or_out_folder_that_cannot_be_written_is_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(blocker))
    assert train.main(["--size", "large", "--skip-quality"]) == 64
    err = capsys.readouterr().err
    assert f"error: {blocker}: cannot write the model cache here" in err
    assert "set PERFGATE_MODEL_CACHE to a folder this user can write, or pass --out DIR" in err
    assert train.main(["--size", "tiny", "--out", str(blocker / "models")]) == 64
    assert f"error: --out: {blocker / 'models'}: cannot create it" in capsys.readouterr().err
    assert "corpus:" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_names_the_device_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(tmp_path))
    assert train.main(["--size", "large", "--device", "cuda"]) == 64
    assert "error: --device: cuda: no CUDA device is visible to torch" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    final = tmp_path / "large-key"
    with pytest.raises(ConfigError), train.staged(final) as work:
        (work / "half").write_text("written")
        raise ConfigError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with train.staged(final) as work:
        (work / "whole").write_text("first")
    with train.staged(final) as work:
        (work / "whole").write_text("second")
        assert (final / "whole").read_text() == "first"  # until the new one is whole
    assert [p.name for p in tmp_path.iterdir()] == ["large-key"]
    assert (final / "whole").read_text() == "second"


def _without_weights(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Start a server of perfgate/llama-large on the CPU with an empty model cache."""
    env = {**server_env(), "PERFGATE_MODEL_CACHE": str(tmp_path / "models")}
    model = ("--model-path", "perfgate/llama-large", "--port", str(free_port()), "--device", "cpu")
    return subprocess.run(
        [sys.executable, "-m", SERVER_MODULE, *model, *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )


@pytest.mark.slow
def test_the_server_refuses_missing_weights_naming_the_command(tmp_path: Path) -> None:
    done = _without_weights(tmp_path)
    assert done.returncode == 64, done.stderr
    assert "perfgate/llama-large: no trained weights on this machine" in done.stderr
    assert "perfgate embedded train --size large --device cuda" in done.stderr


@pytest.mark.slow
def test_a_dummy_server_serves_seeded_weights_and_says_so(tmp_path: Path) -> None:
    from perfgate.engines.embedded.model_dirs import model_identity

    flags = (
        *("--model-path", TARGET, "--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", DRAFT, "--load-format", "dummy"),
    )
    with serving(flags, tmp_path / "server.log") as client:
        body = {"text": "Return the", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        assert len(client.post("/generate", json=body).json()["output_ids"]) == 8
        info = client.get("/server_info").json()
    assert info["load_format"] == "dummy"
    assert info["model_identity"] == model_identity(TARGET, seeded=True) != model_identity(TARGET)
    assert info["draft_model_identity"] == model_identity(DRAFT, seeded=True)


def test_a_tensor_parallel_server_refuses_missing_weights_before_starting_a_rank(
    tmp_path: Path,
) -> None:
    done = _without_weights(tmp_path, "--tp-size", "2")
    assert done.returncode == 64, done.stderr
    # Refused once, by rank 0 before it starts a rank (a started rank would refuse too).
    assert done.stderr.count("perfgate/llama-large: no trained weights on this machine") == 1
