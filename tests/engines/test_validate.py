"""Refused before launch: SGLang's spec rules in its words, owned flags, paths, interpreter."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.config import Scenario
from perfgate.errors import ConfigError, InfrastructureError
from perfgate.preflight import check_scenario, preflight
from perfgate.sglang import facts as facts

from .conftest import SetGpus

FILE = Path("perfgate.toml")
SCENARIO = Scenario(
    name="s",
    engine="sglang",
    model="org/target",
    draft="org/draft",
    steps=3,
    topk=1,
    draft_tokens=4,
    tp=2,
)


def _refusal(scenario: Scenario, release: str = "0.5.23") -> str:
    with pytest.raises(ConfigError) as caught:
        check_scenario(scenario, FILE, facts.release(release))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_draft_tokens_must_be_steps_plus_one_with_topk_1() -> None:
    message = _refusal(replace(SCENARIO, draft_tokens=8))
    assert message.startswith("perfgate.toml:scenarios.s.draft_tokens: is 8 with topk = 1;")
    assert facts.RULE_DRAFT_TOKENS in message
    assert message.endswith("set draft_tokens = 4 (steps + 1)")


def test_trtllm_mha_needs_topk_1() -> None:
    tree = replace(SCENARIO, topk=4, draft_tokens=8, extra_args=("--attention-backend=trtllm_mha",))
    assert "trtllm_mha backend only supports topk = 1 for speculative decoding." in _refusal(tree)
    other = replace(tree, extra_args=("--attention-backend", "fa3"))
    assert check_scenario(other, FILE, facts.release("0.5.23")) == []


def test_paged_trees_need_one_of_the_releases_backends() -> None:
    paged = replace(
        SCENARIO,
        topk=4,
        draft_tokens=8,
        spec_extra_args=("--page-size", "64", "--attention-backend", "triton"),
    )
    assert check_scenario(paged, FILE, facts.release("0.5.23")) == []  # triton joined in 0.5.13
    assert "only supported for the 'flashinfer' backend" in _refusal(paged, "0.5.12")
    unknown = replace(paged, spec_extra_args=("--page-size", "64"))
    (note,) = check_scenario(unknown, FILE, facts.release("0.5.23"))
    assert "flashinfer, fa3, triton" in note


@pytest.mark.parametrize(
    ("key", "args", "fix"),
    [
        ("extra_args", ("--tp", "8"), None),  # not an owned flag name: SGLang's own prefix matching
        ("extra_args", ("--tp-size", "8"), "set scenarios.s.tp instead"),
        ("spec_extra_args", ("--speculative-num-steps=5",), "set scenarios.s.steps instead"),
        ("plain_extra_args", ("--port", "1"), "remove it: (perfgate chooses a free one)"),
        ("extra_args", ("--enable-metrics",), "set scenarios.s.engine_metrics instead"),
        ("extra_args", ("--model", "x"), "set scenarios.s.model instead"),
    ],
)
def test_flags_perfgate_owns_are_refused_in_pass_through(
    key: str, args: tuple[str, ...], fix: str | None
) -> None:
    scenario = replace(SCENARIO, **{key: args})  # type: ignore[arg-type]
    if fix is None:
        assert check_scenario(scenario, FILE, facts.release("0.5.23")) == []
    else:
        assert _refusal(scenario).endswith(fix)


def _fake_sglang(tmp_path: Path, version: str) -> dict[str, str]:
    site = tmp_path / "site"
    (site / f"sglang-{version}.dist-info").mkdir(parents=True, exist_ok=True)
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(
        f"Name: sglang\nVersion: {version}\n"
    )
    return {"PYTHONPATH": str(site)}


def test_preflight_finds_the_release_and_the_gpus(tmp_path: Path, fake_gpus: SetGpus) -> None:
    scenario = replace(SCENARIO, env=_fake_sglang(tmp_path, "0.5.22"))
    checked = preflight(scenario, FILE, environ={})
    assert checked.engine_version == "0.5.22"
    assert [g.index for g in checked.gpus] == [0, 1]
    assert any(
        "'org/target' is not a local folder" in note and "offline" in note for note in checked.notes
    )


def test_preflight_refuses_an_unsupported_release(tmp_path: Path, fake_gpus: SetGpus) -> None:
    scenario = replace(SCENARIO, env=_fake_sglang(tmp_path, "0.4.6"))
    with pytest.raises(
        ConfigError,
        match=r"scenarios.s.python: SGLang 0.4.6 is outside the releases perfgate supports \(>=0.5.6,<0.5.24\)",
    ):
        preflight(scenario, FILE, environ={})


def test_preflight_refuses_missing_sglang_paths_and_interpreters(
    tmp_path: Path, fake_gpus: SetGpus
) -> None:
    with pytest.raises(ConfigError, match="SGLang is not installed in"):
        preflight(SCENARIO, FILE, environ={})
    with pytest.raises(ConfigError, match=r"scenarios.s.python: .*/nope is not an executable file"):
        preflight(replace(SCENARIO, python=str(tmp_path / "nope")), FILE)
    env = _fake_sglang(tmp_path, "0.5.23")
    (tmp_path / "weights").mkdir()
    with pytest.raises(
        ConfigError, match=r"scenarios.s.model: .*/weights is a local path without a config.json"
    ):
        preflight(replace(SCENARIO, env=env, model=str(tmp_path / "weights")), FILE, environ={})
    with pytest.raises(ConfigError, match=r"scenarios.s.draft: /no/such/draft does not exist"):
        preflight(replace(SCENARIO, env=env, draft="/no/such/draft"), FILE, environ={})
    (tmp_path / "weights" / "config.json").write_text("{}")
    checked = preflight(
        replace(SCENARIO, env=env, model=str(tmp_path / "weights")), FILE, environ={}
    )
    assert not any("target" in n for n in checked.notes)


def test_preflight_on_a_machine_without_enough_gpus(tmp_path: Path, fake_gpus: SetGpus) -> None:
    fake_gpus(1)
    with pytest.raises(InfrastructureError, match="shows 1 GPU"):
        preflight(replace(SCENARIO, env=_fake_sglang(tmp_path, "0.5.23")), FILE, environ={})
    cpu = replace(SCENARIO, env=_fake_sglang(tmp_path, "0.5.23"), device="cpu")
    assert preflight(cpu, FILE, environ={}).gpus == ()


def test_the_embedded_engine_needs_no_sglang() -> None:
    checked = preflight(replace(SCENARIO, engine="embedded", python=sys.executable), FILE)
    assert checked.sglang is None and checked.installed is not None and checked.installed.torch


def test_an_embedded_scenario_on_sglang_is_refused_naming_what_sglang_lacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import write_config
    from ..in_process import perfgate_main

    write_config(tmp_path)  # the tiny embedded scenario: --num-threads 1, perfgate/... models
    for command in (("servers", "--dry-run"), ("run", "--no-gate")):
        result = perfgate_main(*command, "--engine", "sglang", cwd=tmp_path)
        assert result.returncode == 64, result.stdout + result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert "scenarios.tiny: SGLang cannot run the embedded engine's own" in line, line
        assert "model perfgate/llama-tiny, draft perfgate/eagle3-llama-tiny" in line, line
        assert "flags --num-threads (extra_args)" in line, line
        assert line.endswith("run it with --engine embedded, or write an SGLang scenario"), line
        assert not (tmp_path / ".perfgate" / "runs").exists()


def test_an_embedded_server_on_gpus_gets_them_checked_and_waited_for_as_sglangs(
    fake_gpus: SetGpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded = replace(SCENARIO, engine="embedded", python=sys.executable, device="cuda")
    # The GPUs the launcher snapshots, and whose memory it waits for after each server.
    assert [g.index for g in preflight(embedded, FILE, environ={}).gpus] == [0, 1]
    listed = preflight(embedded, FILE, environ={"CUDA_VISIBLE_DEVICES": "5,3"})
    assert [g.index for g in listed.gpus] == [5, 3]
    fake_gpus(8, used_mib=[90000.0] + [500.0] * 7)
    with pytest.raises(InfrastructureError, match=r"GPU 0 \(NVIDIA H200\) already has 87.9 of"):
        preflight(embedded, FILE, environ={})
    assert preflight(replace(embedded, device="cpu"), FILE, environ={}).gpus == ()
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: nothing to wait for, said
    unread = preflight(embedded, FILE, environ={})
    assert unread.gpus == ()
    assert any("cannot wait for a server's GPU memory" in note for note in unread.notes)


EMBEDDED = replace(SCENARIO, engine="embedded", model="perfgate/llama-tiny", tp=1, device="cpu")


@pytest.mark.parametrize(
    ("torch", "safetensors", "missing"),
    [
        (None, None, "torch and safetensors"),
        ("2.13.0", None, "safetensors"),
        (None, "0.8", "torch"),
    ],
)
def test_an_embedded_scenario_without_the_engines_extra_is_refused_naming_it(
    torch: str | None, safetensors: str | None, missing: str
) -> None:
    from perfgate.preflight import require_embedded_extra

    installed = facts.InstalledVersions("/venv/bin/python", None, torch, safetensors)
    with pytest.raises(ConfigError) as caught:
        require_embedded_extra(EMBEDDED, FILE, installed)
    assert caught.value.exit_code == 64
    assert str(caught.value) == (
        f"perfgate.toml:scenarios.s.engine: the embedded engine needs {missing}, which "
        "/venv/bin/python does not have: they come with the extra perfgate[embedded]; "
        "pip install 'perfgate[embedded]' in that environment, or run an SGLang scenario"
    )
    require_embedded_extra(EMBEDDED, FILE, replace(installed, torch="2.13", safetensors="0.8"))
    require_embedded_extra(SCENARIO, FILE, installed)  # SGLang brings its own


def test_the_gate_refuses_up_front_what_this_interpreter_cannot_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfgate import preflight as validate

    validate.require_embedded_extra_here(EMBEDDED, FILE)  # this venv has the extra
    monkeypatch.setattr(validate, "_distribution_here", lambda name: name != "torch")
    with pytest.raises(ConfigError, match=r"needs torch, which .* does not have"):
        validate.require_embedded_extra_here(EMBEDDED, FILE)
    # Another interpreter, or its own PYTHONPATH: its preflight asks that interpreter.
    validate.require_embedded_extra_here(replace(EMBEDDED, python="/other/python"), FILE)
    validate.require_embedded_extra_here(replace(EMBEDDED, env={"PYTHONPATH": "/x"}), FILE)


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("algorithm", "MEDUSA", "EAGLE3, EAGLE, STANDALONE"),
        ("dtype", "float7", "auto, float32, bfloat16, float16"),
        ("device", "tpu", "auto, cpu, cuda"),
    ],
)
def test_an_embedded_server_s_choice_it_does_not_have_is_refused_before_launch(
    key: str, value: str, allowed: str
) -> None:
    embedded = replace(SCENARIO, engine="embedded", tp=1, **{key: value})
    message = _refusal(embedded)
    assert message == (
        f"perfgate.toml:scenarios.s.{key}: the embedded engine has no {key} {value!r}; "
        f"use one of {allowed}"
    )
    assert (
        check_scenario(
            replace(embedded, **{key: "eagle3" if key == "algorithm" else "auto"}),
            FILE,
            facts.release("0.5.23"),
        )
        == []
    )
