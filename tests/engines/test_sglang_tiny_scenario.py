"""The shipped scenario sglang-tiny-eagle3: perfgate's exported tiny pair on SGLang, refused
before launch where the folders are missing, the draft does not fit its target, or the release
is not one perfgate supports."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.config import Scenario, load_config
from perfgate.engines.embedded.export import export_model
from perfgate.errors import ConfigError
from perfgate.preflight import preflight

from ..conftest import REPO
from ..in_process import perfgate_main
from .conftest import SetGpus
from .test_validate import _fake_sglang

NAME = "sglang-tiny-eagle3"
CONFIG = REPO / "perfgate.toml"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding .perfgate/export/ as the scenario's comments say to make it."""
    root = tmp_path_factory.mktemp("checkout")
    for name in ("llama-tiny", "eagle3-llama-tiny"):
        export_model(f"perfgate/{name}", root / ".perfgate" / "export" / name)
    return root


def _scenario(tmp_path: Path, version: str = "0.5.16") -> Scenario:
    scenario = load_config(CONFIG).scenarios[NAME]
    return replace(scenario, env={**scenario.env, **_fake_sglang(tmp_path, version)})


def _refusal(scenario: Scenario) -> str:
    with pytest.raises(ConfigError) as caught:
        preflight(scenario, CONFIG, environ={})
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_scenario_runs_the_exported_pair_on_sglang_with_triton_in_bf16() -> None:
    scenario = load_config(CONFIG).scenarios[NAME]
    assert (scenario.engine, scenario.dtype, scenario.algorithm) == ("sglang", "bfloat16", "EAGLE3")
    assert scenario.model == ".perfgate/export/llama-tiny"
    assert scenario.draft == ".perfgate/export/eagle3-llama-tiny"
    assert scenario.extra_args[:2] == ("--attention-backend", "triton")
    assert NAME not in load_config(CONFIG).default_scenarios


def test_the_exported_pair_passes_preflight(
    exported: Path, tmp_path: Path, fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(exported)
    checked = preflight(_scenario(tmp_path), CONFIG, environ={})
    assert checked.engine_version == "0.5.16" and [g.index for g in checked.gpus] == [0]
    assert not any("Hugging Face id" in note for note in checked.notes), checked.notes


def test_a_missing_export_is_refused_naming_the_command(tmp_path: Path, fake_gpus: SetGpus) -> None:
    done = perfgate_main(
        "servers", "--config", str(CONFIG), "--scenario", NAME, cwd=tmp_path,
        env=_fake_sglang(tmp_path, "0.5.16"),
    )  # fmt: skip
    assert done.returncode == 64, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.endswith(
        f"scenarios.{NAME}.model: .perfgate/export/llama-tiny does not exist; export it first: "
        "perfgate embedded export perfgate/llama-tiny .perfgate/export/llama-tiny (paths are "
        "taken from the folder perfgate runs in)"
    ), line


def test_a_draft_of_another_hidden_size_is_refused_before_launch(
    exported: Path, tmp_path: Path, fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = tmp_path / "wide-draft"
    shutil.copytree(exported / ".perfgate" / "export" / "eagle3-llama-tiny", draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | {"target_hidden_size": 256}))
    monkeypatch.chdir(exported)
    message = _refusal(replace(_scenario(tmp_path), draft=str(draft)))
    assert message.startswith(
        f"{draft / 'config.json'}:target_hidden_size: is 256, the target's hidden_size is 128 "
        "(.perfgate/export/llama-tiny/config.json)"
    )
    assert message.endswith(
        f"point scenarios.{NAME}.draft at the EAGLE-3 head trained for this target "
        "(`perfgate embedded export` writes the pair)"
    )


def test_a_target_without_its_pass_through_layer_is_refused_naming_the_export(
    exported: Path, tmp_path: Path, fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "llama-tiny-4"
    export_model("perfgate/llama-tiny", target, pass_through="no")
    monkeypatch.chdir(exported)
    message = _refusal(replace(_scenario(tmp_path), model=str(target)))
    assert "eagle_config.eagle_aux_hidden_state_layer_ids: eagle_config" in message
    assert "[0, 1, 3]: SGLang's Llama target of 4 layers" in message
    assert "captures ids 0 to 2 only" in message and "so [3] would never reach the draft" in message
    assert message.endswith(
        f"perfgate embedded export perfgate/llama-tiny {target} --force --pass-through-layer yes"
    )


def test_a_release_outside_the_supported_ones_is_refused(
    exported: Path, tmp_path: Path, fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(exported)
    message = _refusal(_scenario(tmp_path, "0.5.24"))
    assert message.startswith(
        f"scenarios.{NAME}.python: SGLang 0.5.24 is outside the releases perfgate supports"
    )


def test_the_live_runs_broken_draft_passes_preflight_so_sglang_itself_meets_it(
    exported: Path, tmp_path: Path, fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # benchmarks/sglang_live.sh's "SGLang dies while loading" case must get past perfgate.
    import sys

    from safetensors import safe_open

    sys.path.insert(0, str(REPO / "benchmarks"))
    import sglang_live

    monkeypatch.chdir(exported)
    broken = sglang_live.broken_draft(Path(".perfgate/export/eagle3-llama-tiny"), tmp_path / "b")
    preflight(replace(_scenario(tmp_path), draft=str(broken)), CONFIG, environ={})
    with safe_open(str(broken / "model.safetensors"), "pt") as weights:
        assert list(weights.get_slice("fc.weight").get_shape()) == [128, 256]  # SGLang's: 384
