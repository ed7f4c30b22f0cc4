"""The twin command lines: the installed release's flags, the same fairness knobs on both."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from perfgate.config import Scenario
from perfgate.engines.server_commands import server_command
from perfgate.errors import ConfigError
from perfgate.sglang import facts as facts

SCENARIO = Scenario(
    name="tp8",
    engine="sglang",
    model="meta-llama/Llama-3.3-70B-Instruct",
    draft="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
    steps=2,
    topk=1,
    draft_tokens=3,
    tp=8,
    dtype="bfloat16",
    python="/opt/sglang/bin/python",
    env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
    extra_args=("--mem-fraction-static", "0.85"),
    spec_extra_args=("--speculative-attention-mode", "decode"),
    plain_extra_args=("--cuda-graph-max-bs", "8"),
)


def _value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_twin_has_the_same_knobs_and_no_speculative_flag() -> None:
    known = facts.release("0.5.23")
    spec = server_command(SCENARIO, "spec", port=1, sglang=known)
    plain = server_command(SCENARIO, "plain", port=2, sglang=known)
    assert spec.argv[:3] == ("/opt/sglang/bin/python", "-m", "sglang.launch_server")
    for flag, value in [
        ("--tp-size", "8"),
        ("--dtype", "bfloat16"),
        ("--max-running-requests", "48"),
        ("--mem-fraction-static", "0.85"),
    ]:
        assert _value(spec.argv, flag) == _value(plain.argv, flag) == value
    assert spec.env == plain.env == SCENARIO.env
    assert [
        _value(spec.argv, f)
        for f in (
            "--speculative-num-steps",
            "--speculative-eagle-topk",
            "--speculative-num-draft-tokens",
        )
    ] == ["2", "1", "3"]
    assert (
        "--speculative-attention-mode" in spec.argv
        and "--speculative-attention-mode" not in plain.argv
    )
    assert "--cuda-graph-max-bs" in plain.argv and "--cuda-graph-max-bs" not in spec.argv
    assert not any(a.startswith("--speculative") for a in plain.argv)
    assert spec.engine_version == "0.5.23"


def test_shell_line_round_trips() -> None:
    command = server_command(replace(SCENARIO, model="/models/with space"), "plain", port=3)
    words = shlex.split(command.shell())
    assert "NCCL_PROTO=LL" in words and "/models/with space" in words


def test_engine_metrics_turn_on_the_gpu_timer_where_the_release_has_it() -> None:
    scenario = replace(SCENARIO, engine_metrics=True)
    new = server_command(scenario, "spec", port=1, sglang=facts.release("0.5.23"))
    old = server_command(scenario, "spec", port=1, sglang=facts.release("0.5.6"))
    assert "--enable-metrics" in new.argv and "--enable-metrics" in old.argv
    assert new.env["SGLANG_ENABLE_METRICS_DEVICE_TIMER"] == "1"
    assert "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in old.env  # 0.5.6 has no such timer
    embedded = server_command(replace(scenario, engine="embedded"), "spec", port=1)
    assert "--enable-metrics" not in embedded.argv  # the embedded engine has no /metrics


@pytest.mark.parametrize("version", ["0.5.5", "0.5.24", "nightly"])
def test_unsupported_releases_are_refused(version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        facts.release(version, field="scenarios.tp8.python")
    assert "scenarios.tp8.python" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_require_sglang_says_how_to_install_it() -> None:
    with pytest.raises(
        ConfigError, match=r"SGLang is not installed in /x/python; pip install sglang==0\.5\.23"
    ):
        facts.require_sglang(
            facts.InstalledVersions("/x/python", None, "2.13.0"), "scenarios.tp8.python"
        )


def test_installed_versions_reads_metadata_without_importing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sys

    found = facts.installed_versions(sys.executable)
    assert found.sglang is None and found.torch is not None
    with pytest.raises(ConfigError, match="cannot run"):
        facts.installed_versions(str(tmp_path / "nope"))


def test_meta_info_names_newest_first() -> None:
    assert facts.all_names("correct_drafts") == (
        "spec_num_correct_drafts",
        "spec_accepted_drafts",
        "spec_accept_token_num",
    )
    assert facts.release("0.5.6").names("correct_drafts") == ("spec_accept_token_num",)
    assert facts.release("0.5.12").names("correct_drafts") == (
        "spec_num_correct_drafts",
        "spec_accepted_drafts",
    )
    assert facts.release("0.5.23").names("server_info") == ("/server_info", "/get_server_info")


def test_dry_run_says_which_release_the_lines_are_for(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import REPO
    from ..in_process import perfgate_main

    result = perfgate_main("servers", "--dry-run", "--scenario", "llama33-70b-eagle3-tp8", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "SGLang is not installed in" in result.stderr
    assert "printing the command lines of SGLang 0.5.23" in result.stderr
    plain, spec = result.stdout.strip().splitlines()
    assert "PERFGATE_PROBE_ENGINE_VERSION=0.5.23" in spec and "PERFGATE_PROBE_MODE=spec" in spec
    assert "PERFGATE_PROBE_MODE=plain" in plain


def test_dry_run_refuses_what_sglang_would_change(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import write_config
    from ..in_process import perfgate_main

    write_config(
        tmp_path,
        '[scenarios.x]\nengine = "sglang"\nmodel = "org/m"\ndraft = "org/d"\nsteps = 3\ntopk = 1\ndraft_tokens = 8\n',
    )
    result = perfgate_main("servers", "--dry-run", cwd=tmp_path)
    assert result.returncode == 64
    assert "scenarios.x.draft_tokens: is 8 with topk = 1" in result.stderr


def test_dry_run_refuses_an_environment_name_a_shell_would_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import write_config
    from ..in_process import perfgate_main

    write_config(
        tmp_path,
        '[scenarios.x]\nengine = "sglang"\nmodel = "org/m"\ndraft = "org/d"\n'
        '[scenarios.x.env]\n"NCCL_A$(touch pwned)" = "1"\n',
    )
    result = perfgate_main("servers", "--dry-run", cwd=tmp_path)
    assert result.returncode == 64, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "scenarios.x.env: 'NCCL_A$(touch pwned)' is not an environment variable name" in line
    assert not (tmp_path / "pwned").exists()


def test_a_pasted_line_runs_nothing_but_the_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    # Whatever reaches the printer (names are refused at load), every word is quoted.
    hostile = {"NCCL_A$(touch pwned)": "1", "OK_NAME": "$(touch pwned-value)"}
    command = replace(server_command(SCENARIO, "plain", port=3), argv=("printenv",), env=hostile)
    done = subprocess.run(
        ["bash", "-c", command.shell()], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert sorted(tmp_path.iterdir()) == []
    assert "NCCL_A$(touch pwned)=1" in done.stdout.splitlines()
    assert "OK_NAME=$(touch pwned-value)" in done.stdout.splitlines()


@pytest.mark.parametrize(
    ("version", "env", "topk", "overlap"),
    [
        ("0.5.6", {}, 1, False),  # SGLANG_ENABLE_SPEC_V2 off by default: spec v1, no overlap
        ("0.5.10.post1", {}, 1, False),
        ("0.5.10.post1", {"SGLANG_ENABLE_SPEC_V2": "1"}, 1, True),
        ("0.5.11", {}, 1, True),  # on by default from 0.5.11
        ("0.5.11", {"SGLANG_ENABLE_SPEC_V2": "false"}, 1, False),
        ("0.5.12.post1", {}, 2, False),  # a tree falls back to spec v1 there
        ("0.5.13", {}, 2, True),
        ("0.5.23", {}, 1, True),
    ],
)
def test_both_servers_are_scheduled_alike(
    version: str, env: dict[str, str], topk: int, overlap: bool
) -> None:
    from perfgate.fingerprint import collect_fingerprint

    scenario = replace(SCENARIO, topk=topk, draft_tokens=4 if topk > 1 else 3, env=env)
    known = facts.release(version)
    plain, spec = (
        server_command(scenario, mode, port=1, sglang=known, environ={})
        for mode in ("plain", "spec")
    )
    # SGLang turns the overlap scheduler off on the speculative server by itself: the twin too.
    assert ("--disable-overlap-schedule" not in plain.argv) == overlap
    assert "--disable-overlap-schedule" not in spec.argv
    printed = collect_fingerprint(scenario, {"version": version}, None, environ={})
    assert printed["overlap_schedule"] == ("on" if overlap else "off")


def test_an_inherited_switch_counts_and_a_chosen_schedule_is_kept() -> None:
    known = facts.release("0.5.6")
    inherited = server_command(
        SCENARIO, "plain", port=1, sglang=known, environ={"SGLANG_ENABLE_SPEC_V2": "true"}
    )
    assert "--disable-overlap-schedule" not in inherited.argv
    off = replace(SCENARIO, spec_extra_args=("--disable-overlap-schedule",))
    for version in ("0.5.6", "0.5.23"):
        plain = server_command(off, "plain", port=1, sglang=facts.release(version), environ={})
        assert plain.argv.count("--disable-overlap-schedule") == 1


@pytest.mark.parametrize(
    ("extra", "spec_extra", "serial"),
    [
        ((), (), False),
        ((), ("--disable-overlap-schedule",), True),
        (("--disable-overlap-schedule",), (), True),
    ],
)
def test_an_embedded_twin_is_scheduled_as_its_speculative_server(
    extra: tuple[str, ...], spec_extra: tuple[str, ...], serial: bool
) -> None:
    scenario = replace(SCENARIO, engine="embedded", extra_args=extra, spec_extra_args=spec_extra)
    plain, spec = (server_command(scenario, mode, port=1) for mode in ("plain", "spec"))
    assert ("--disable-overlap-schedule" in spec.argv) is serial
    assert plain.argv.count("--disable-overlap-schedule") == (1 if serial else 0)


def test_an_embedded_run_without_the_overlap_schedule_says_so_in_its_fingerprint() -> None:
    from perfgate.fingerprint import collect_fingerprint
    from perfgate.plain_reuse import plain_reuse_key

    overlapped = replace(SCENARIO, engine="embedded")
    serial = replace(overlapped, spec_extra_args=("--disable-overlap-schedule",))  # twin too
    printed = [collect_fingerprint(s, {"version": "0.1.0"}, None, {}) for s in (overlapped, serial)]
    assert "overlap_schedule" not in printed[0]  # on, as every embedded run before it
    assert printed[1]["overlap_schedule"] == "off"
    # So a plain twin measured serially is never reused for an overlapped one, or back.
    keys = {plain_reuse_key(s, "0.1.0", None, None, {}) for s in (overlapped, serial)}
    assert len(keys) == 2


@pytest.mark.parametrize("engine", ["sglang", "embedded"])
def test_a_command_moved_to_another_port_listens_there_and_nowhere_else(engine: str) -> None:
    scenario = replace(SCENARIO, engine=engine, python=None, max_running_requests=30000)
    command = server_command(scenario, "spec", port=30000, sglang=facts.release("0.5.23"))
    moved = command.on_port(41234)
    assert moved is not None
    assert _value(moved.argv, "--port") == "41234" and moved.base_url.endswith(":41234")
    # Only the port's own value moves, not another flag's equal number.
    changed = [i for i, (a, b) in enumerate(zip(command.argv, moved.argv, strict=True)) if a != b]
    assert changed == [command.argv.index("--port") + 1]
    assert _value(moved.argv, "--max-running-requests") == "30000"
