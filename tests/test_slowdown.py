"""A phase slowed on purpose: named in the fingerprint, judged, refused in CI and as a baseline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.errors import ConfigError
from perfgate.fingerprint import diff_fingerprints, injection_field
from perfgate.gate import Status
from perfgate.results import RunContext, RunRecord
from perfgate.spec import slowdown
from perfgate.store import comparable_runs, open_history

from .conftest import write_config
from .in_process import perfgate_main
from .test_gate_cli import CONFIG, approve, cli, record
from .test_judging import noisy

SLOWED = {**noisy(0).fingerprint, slowdown.FINGERPRINT_FIELD: "verify +900.0%"}


def slowed_run(seed: int, verify_ms: float = 20.0) -> RunRecord:
    measurement = noisy(seed, verify_ms=verify_ms)
    return RunRecord(
        replace(measurement, fingerprint=SLOWED), RunContext(commit="c0"), (), Status.PASS
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("verfy=0.02", "no phase 'verfy'"),
        ("verify=0", "above 0"),
        ("verify=-0.5", "above 0"),
        ("verify=fast", "above 0"),
        ("verify=101", "at most 100"),
    ],
)
def test_a_bad_slowdown_names_its_setting_and_the_fix(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        slowdown.parse_slow_phases(text, field=slowdown.VARIABLE)
    assert str(raised.value).startswith(f"{slowdown.VARIABLE}: ")
    assert "verify=0.02" in str(raised.value)


def test_the_fingerprint_names_what_the_server_slowed() -> None:
    assert injection_field({"debug_slow_phase": {}, "debug_verify_delay_ms": 0.0}) == {}
    assert injection_field({"version": "0.5.23"}) == {}  # SGLang: no such flags
    field = injection_field({"debug_slow_phase": {"verify": 0.02, "cycle": 0.08}})
    assert field == {slowdown.FINGERPRINT_FIELD: "verify +2.0%, cycle +8.0%"}
    delayed = injection_field({"debug_verify_delay_ms": 200.0})
    assert delayed == {slowdown.FINGERPRINT_FIELD: "verify +200 ms"}
    # Judged against the unslowed baseline: the field is no difference, anything else is.
    clean = noisy(0).fingerprint
    assert diff_fingerprints(clean, SLOWED) == []
    assert diff_fingerprints(clean, {**SLOWED, "gpu": "H200"}) == [("gpu", "none", "H200")]


def test_a_slowed_run_is_judged_against_clean_runs_and_is_never_their_reference(
    tmp_path: Path,
) -> None:
    write_config(tmp_path, CONFIG)
    clean_ids = record(
        tmp_path, [RunRecord(noisy(s), RunContext(), (), Status.PASS) for s in (1, 2)]
    )
    slowed_ids = record(tmp_path, [slowed_run(3)])
    sessions = open_history(f"sqlite:///{tmp_path / 'history.db'}")
    statuses = [Status.PASS.value]
    with sessions() as session:
        for fingerprint in (SLOWED, noisy(0).fingerprint):
            found = comparable_runs(session, "tiny", "cpu", fingerprint, 5, statuses=statuses)
            assert [r.id for r in found] == clean_ids
    assert slowed_ids[0] not in clean_ids


def test_a_slowed_run_is_caught_against_the_baseline_and_never_approved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(tmp_path, CONFIG)
    ids = record(
        tmp_path, [RunRecord(noisy(s), RunContext(commit="c0"), (), Status.PASS) for s in range(5)]
    )
    assert approve(tmp_path, *ids) == 0
    (slowed,) = record(tmp_path, [slowed_run(10, verify_ms=200.0)])
    capsys.readouterr()
    assert cli(tmp_path, "gate", "--run", str(slowed), "--json") == 1
    verdicts = {v["metric"]: v["status"] for v in json.loads(capsys.readouterr().out)["verdicts"]}
    assert verdicts["verify_ms"] == "regression"  # judged, not incomparable
    forced = ["--run", str(slowed), "--approved-by", "a", "--reason", "r", "--force"]
    assert cli(tmp_path, "baseline", "update", *forced) == 64
    err = capsys.readouterr().err
    assert f"run {slowed} cannot be approved: it was slowed on purpose (verify +900.0%" in err
    assert "--force or not" in err
    baseline = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert [r["run_id"] for r in baseline["runs"]] == ids  # nothing half-written


@pytest.mark.parametrize(
    ("env", "scenario_line", "named"),
    [
        ({slowdown.VARIABLE: "verify=0.02"}, "", slowdown.VARIABLE),
        (
            {},
            'spec_extra_args = ["--debug-slow-phase", "cycle=0.08"]',
            "scenarios.tiny.spec_extra_args",
        ),
        ({}, '[scenarios.tiny.env]\nPERFGATE_DEBUG_SLOW_PHASE = "draft=1"', slowdown.VARIABLE),
    ],
    ids=["environment", "flag", "scenario-env"],
)
def test_a_gating_run_in_ci_refuses_a_slowdown_before_anything_starts(
    tmp_path: Path, env: dict[str, str], scenario_line: str, named: str
) -> None:
    text = CONFIG.replace(
        'extra_args = ["--num-threads", "1"]',
        f'extra_args = ["--num-threads", "1"]\n{scenario_line}',
    )
    if scenario_line.startswith("[scenarios.tiny.env]"):
        text = CONFIG + "\n" + scenario_line + "\n"
    write_config(tmp_path, text)
    result = perfgate_main("run", cwd=tmp_path, env={"CI": "true", **env})
    assert result.returncode == 64, result.stdout + result.stderr
    assert f"{named}: " in result.stderr and "slows a phase on purpose" in result.stderr
    assert "only validate the gate" in result.stderr
    assert not (tmp_path / "history.db").exists()  # refused before any history or server


@pytest.mark.parametrize(
    ("env", "scenario_line", "named"),
    [
        ({slowdown.VARIABLE: "junk"}, "", f"{slowdown.VARIABLE}: 'junk': no phase 'junk'"),
        (
            {slowdown.VARIABLE: "verify=0.02"},  # read too, and fine: the flag still is not
            'spec_extra_args = ["--debug-slow-phase", "verify=lots"]',
            "scenarios.tiny.spec_extra_args: 'verify=lots': the fraction must be a number",
        ),
        (
            {},
            f'[scenarios.tiny.env]\n{slowdown.VARIABLE} = "draft"',
            f"scenarios.tiny.env.{slowdown.VARIABLE}: 'draft': the fraction must be a number",
        ),
    ],
    ids=["environment", "flag-beside-a-good-variable", "scenario-env"],
)
@pytest.mark.parametrize("command", [["run", "--no-gate"], ["servers", "--dry-run"]])
def test_a_slowdown_the_server_cannot_read_is_refused_before_it_starts(
    tmp_path: Path, env: dict[str, str], scenario_line: str, named: str, command: list[str]
) -> None:
    """The server refused it after its launch, telling the user to fix the scenario. Every
    setting its servers would read is read, by every command that launches them."""
    if scenario_line.startswith("[scenarios.tiny.env]"):
        text = CONFIG + "\n" + scenario_line + "\n"
    else:
        text = CONFIG.replace(
            'extra_args = ["--num-threads", "1"]',
            f'extra_args = ["--num-threads", "1"]\n{scenario_line}',
        )
    write_config(tmp_path, text)
    result = perfgate_main(*command, cwd=tmp_path, env=env)
    assert result.returncode == 64, result.stdout + result.stderr
    assert named in result.stderr, result.stderr
    assert "starting" not in result.stdout + result.stderr
