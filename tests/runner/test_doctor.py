"""`perfgate doctor`: every check with its status, human and JSON, and the documented exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import TINY_SCENARIO, write_config
from . import fake_smi
from .conftest import run_cli

ON_CUDA = TINY_SCENARIO.replace('device = "cpu"', 'device = "cuda"')


def _doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = run_cli(
        "doctor",
        "--json",
        *args,
        env={"PATH": str(tmp_path / "none") + ":/usr/bin:/bin", **(env or {})},
        cwd=tmp_path,
    )
    return result.returncode, json.loads(result.stdout)


def _checks(document: dict, status: str) -> list[str]:  # type: ignore[type-arg]
    return [f"{c['name']}: {c['detail']}" for c in document["checks"] if c["status"] == status]


def test_a_cpu_machine_ready_for_a_first_run(tmp_path: Path) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--no-gate")
    assert code == 0 and document["ok"], document
    names = [c["name"] for c in document["checks"]]
    assert names == [
        "config",
        "perfgate",
        "torch",
        "engine tiny",
        "gpus",
        "ports",
        "history",
        "baselines",
        "machine state",
    ]
    assert "gpus: none (the selected scenarios run on the CPU)" in _checks(document, "ok")


def test_a_missing_baseline_is_bad_input(tmp_path: Path) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path)
    assert code == 64
    (failed,) = _checks(document, "fail")
    assert failed.startswith("baselines: ") and "tiny.json: no such baseline" in failed


def test_gpus_busy_for_a_gpu_scenario_are_an_infrastructure_failure(tmp_path: Path) -> None:
    write_config(tmp_path, ON_CUDA)
    smi = fake_smi.install(tmp_path / "bin", fake_smi.gpus(2, **{"1": {"memory.used": "9000"}}))
    code, document = _doctor(tmp_path, "--no-gate", env=smi)
    assert code == 69, document
    assert "gpus: 2 x NVIDIA H200, driver 580.159.04, CUDA 12.8" in _checks(document, "ok")
    assert _checks(document, "fail") == [
        "gpus: GPU 1 (NVIDIA H200) is busy: 9000 of 143771 MiB in use (an idle GPU shows at most 1024)"
    ]
    write_config(tmp_path)  # the same GPUs only warn when the scenario runs on the CPU
    code, document = _doctor(tmp_path, "--no-gate", env=smi)
    assert code == 0 and len(_checks(document, "warn")) == 1


def test_no_gpu_for_a_gpu_scenario(tmp_path: Path) -> None:
    write_config(tmp_path, ON_CUDA)
    code, document = _doctor(tmp_path, "--no-gate")
    assert code == 69 and _checks(document, "fail") == [
        "gpus: no nvidia-smi on PATH, but tiny needs GPUs"
    ]


def test_an_unreachable_history_and_a_bad_config(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    write_config(tmp_path)
    code, document = _doctor(
        tmp_path, "--no-gate", "--db", "postgresql://perfgate@127.0.0.1:9/none"
    )
    assert code == 69, document
    (failed,) = _checks(document, "fail")
    assert failed.startswith("history: ")
    write_config(tmp_path, TINY_SCENARIO.replace("repeats = 3", "repeats = -1"))
    code, document = _doctor(tmp_path)
    assert code == 64 and _checks(document, "fail")[0].startswith("config: ")
    assert [c["name"] for c in document["checks"]] == [
        "config",
        "perfgate",
        "torch",
        "ports",
        "machine state",
    ]


def test_the_human_output(tmp_path: Path) -> None:
    write_config(tmp_path)
    result = run_cli("doctor", env={}, cwd=tmp_path)
    assert result.returncode == 64
    assert result.stdout.splitlines()[-1] == "perfgate doctor: 1 problem(s), exit 64"
    assert any(line.startswith("  FAIL  baselines") for line in result.stdout.splitlines())


def test_a_history_inside_the_checkout_is_a_warning_in_ci(tmp_path: Path) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--no-gate", env={"GITHUB_WORKSPACE": str(tmp_path)})
    assert code == 0
    (warned,) = _checks(document, "warn")
    assert "history.db is inside the job's checkout" in warned and "PERFGATE_DB_URL" in warned
