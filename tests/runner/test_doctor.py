"""`perfgate doctor`: every check with its status, human and JSON, the documented exit codes,
and its predictions of what `perfgate run` will meet: the reference a run is judged against
(with every fingerprint field that differs), a history it cannot write, a GPU it lacks."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfgate import devices
from perfgate.baselines import approve_run
from perfgate.config import load_config
from perfgate.hardware import GpuInfo, cpu_slug
from perfgate.runner.doctor import Machine, _judge_baseline
from perfgate.runner.predict import predict_fingerprint
from perfgate.spec.options import GateOptions
from perfgate.store import close_history, open_history

from .. import fake_smi
from ..conftest import REPO, TINY_SCENARIO, write_config
from ..hang import HANG_S
from ..in_process import perfgate_main
from ..lockdown import FAKE_CPU, fake_cpuinfo, immutable, require_unshare, with_mounts
from ..recorded import RecordedProject
from ..test_reference import _reviewed

ON_CUDA = TINY_SCENARIO.replace('device = "cpu"', 'device = "cuda"')
NO_GPU_PATH = "/usr/bin:/bin"
ON_CPU_TOO = """
[scenarios.tiny-cpu]
engine = "embedded"
model = "perfgate/llama-tiny"
draft = "perfgate/eagle3-llama-tiny"
device = "cpu"
"""
LOCAL = {"CI": "", "GITHUB_WORKSPACE": ""}  # as on a laptop, also when the tests run in CI

# A reviewed baseline of embedded-default, as approved on a 2-core AMD EPYC machine.
AMD_BASELINE = Path(__file__).resolve().parent.parent / "data" / "baseline-cpu-amd-epyc-2c.json"


def _doctor(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    read_only: tuple[Path, ...] = (),
    cpuinfo: Path | None = None,
) -> tuple[int, dict[str, Any]]:
    """`perfgate doctor --json ARGS` in tmp_path; every failed check must name its fix."""
    # The GPUs only through an nvidia-smi on PATH: NVML would find a GPU machine's own.
    path = f"{tmp_path / 'none'}:{NO_GPU_PATH}"
    env = {"PATH": path, "PERFGATE_GPU_READER": "nvidia-smi", **LOCAL, **(env or {})}
    if read_only or cpuinfo:
        result = _cli_with_mounts(tmp_path, ["doctor", "--json", *args], env, read_only, cpuinfo)
    else:  # in this process, which reads the GPUs afresh through the PATH given
        devices.reset_cache()
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("PERFGATE_MACHINE_STATE", raising=False)
            result = perfgate_main("doctor", "--json", *args, cwd=tmp_path, env=env)
        devices.reset_cache()
    document = json.loads(result.stdout)
    for check in document["checks"]:
        if check["status"] == "fail":
            assert check["fix"] and check["exit_code"] in (64, 69), check
    return result.returncode, document


def _cli_with_mounts(
    cwd: Path,
    args: list[str],
    env: dict[str, str],
    read_only: tuple[Path, ...],
    cpuinfo: Path | None,
) -> subprocess.CompletedProcess[str]:
    require_unshare()
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    for name in ("PERFGATE_DB_URL", "PERFGATE_PROFILE", "PERFGATE_MACHINE_STATE"):
        full.pop(name, None)
    argv = with_mounts(
        [sys.executable, "-m", "perfgate", *args], read_only=read_only, cpuinfo=cpuinfo
    )
    return subprocess.run(
        argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=HANG_S, check=False
    )


def _checks(document: dict[str, Any], status: str) -> list[str]:
    return [f"{c['name']}: {c['detail']}" for c in document["checks"] if c["status"] == status]


def _check(document: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in document["checks"] if c["name"] == name]
    return dict(found)


def _require_no_gpu() -> None:
    if shutil.which("nvidia-smi", path=NO_GPU_PATH):
        pytest.skip(
            f"this machine has nvidia-smi in {NO_GPU_PATH}: it is not a machine without GPUs"
        )


def _repo_config(folder: Path) -> Path:
    """This repository's config, and a baseline of its default scenario from a 2-core AMD EPYC."""
    shutil.copy(REPO / "perfgate.toml", folder / "perfgate.toml")
    baseline = folder / "baselines" / "cpu-amd-epyc-2c" / "embedded-default.json"
    baseline.parent.mkdir(parents=True)
    shutil.copy(AMD_BASELINE, baseline)
    return baseline


def test_a_cpu_machine_ready_for_a_first_run(tmp_path: Path) -> None:
    _require_no_gpu()
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
    ok = _checks(document, "ok")
    assert "gpus: none (no nvidia-smi on PATH; the selected scenarios run on the CPU)" in ok
    engine = _check(document, "engine tiny")["detail"]
    assert (
        "model perfgate/llama-tiny@sha256:" in engine
        and "draft perfgate/eagle3-llama-tiny@sha256:" in engine
    )
    history = _check(document, "history")["detail"]
    assert (
        history
        == f"sqlite:///{tmp_path}/history.db: writable (not created yet; {tmp_path} is writable, so the first run creates it)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perfgate.toml"]  # nothing written


@pytest.mark.parametrize(
    ("content", "status", "said"),
    [
        ('{"fingerprint": {"gpu_clocks": "locked"}}', "ok", "GPU settings go into the fingerprint"),
        ("[perfgate]\n", "warn", "holds no GPU settings job-started wrote"),
        ('{"fingerprint": "locked"}', "warn", "holds no GPU settings job-started wrote"),
    ],
)
def test_the_machine_state_is_read_as_a_run_would_read_it(
    tmp_path: Path, content: str, status: str, said: str
) -> None:
    """A state file that is not job-started's (a config named by mistake) was said to put GPU
    settings into the fingerprint, which then got none."""
    _require_no_gpu()
    write_config(tmp_path)
    state = tmp_path / "state.json"
    state.write_text(content)
    _, document = _doctor(tmp_path, "--no-gate", env={"PERFGATE_MACHINE_STATE": str(state)})
    check = _check(document, "machine state")
    assert check["status"] == status and said in check["detail"], check


def test_without_a_reviewed_baseline_a_local_run_is_judged_against_its_own_history(
    tmp_path: Path,
) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--profile", "laptop")
    assert code == 0, document
    check = _check(document, "baseline tiny")
    assert check["status"] == "ok"
    assert check["detail"].startswith(
        f"no reviewed baseline for runner profile laptop ({tmp_path}/baselines/laptop/tiny.json): "
        "the run will be judged against this machine's own history"
    )


@pytest.mark.parametrize(("args", "env"), [((), {"CI": "true"}), (("--require-baseline",), {})])
def test_ci_requires_a_reviewed_baseline(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--profile", "laptop", *args, env=env)
    assert code == 64, document
    (failed,) = [c for c in document["checks"] if c["status"] == "fail"]
    assert failed["name"] == "baseline tiny" and failed["exit_code"] == 64
    assert "no reviewed baseline for scenario 'tiny' on runner profile 'laptop'" in failed["detail"]
    assert "`perfgate run --no-gate --scenario tiny`" in failed["fix"]
    assert "`perfgate baseline update --run ID" in failed["fix"]
    assert "baselines/laptop/tiny.json" in failed["fix"]


@pytest.mark.slow
def test_a_baseline_measured_on_another_cpu(tmp_path: Path) -> None:
    """An AMD EPYC baseline, on this machine made to show another CPU model."""
    baseline = _repo_config(tmp_path)
    recorded_cpu = json.loads(baseline.read_text())["fingerprint"]["cpu"]
    cpuinfo = fake_cpuinfo(tmp_path)
    args = ("--profile", "cpu-amd-epyc-2c", "--scenario", "embedded-default")
    code, document = _doctor(tmp_path, *args, cpuinfo=cpuinfo)
    assert code == 0, document
    check = _check(document, "baseline embedded-default")
    assert check["status"] == "warn"
    assert check["detail"].startswith(f"{baseline} was measured in another environment (")
    assert f"cpu: {recorded_cpu} -> {FAKE_CPU}" in check["detail"]
    assert check["detail"].endswith("): the run will be judged against this machine's own history")
    assert "perfgate baseline update" in check["fix"]

    code, document = _doctor(tmp_path, *args, env={"CI": "true"}, cpuinfo=cpuinfo)
    assert code == 64, document
    check = _check(document, "baseline embedded-default")
    assert check["status"] == "fail" and f"cpu: {recorded_cpu} -> {FAKE_CPU}" in check["detail"]
    assert (
        "CI (or --require-baseline) judges only against a matching reviewed baseline"
        in check["detail"]
    )
    assert "`perfgate run --no-gate --scenario embedded-default`" in check["fix"]

    # Without --profile, the profile names the CPU: no baseline is looked for under AMD's.
    code, document = _doctor(tmp_path, "--scenario", "embedded-default", cpuinfo=cpuinfo)
    profile = f"cpu-{cpu_slug(FAKE_CPU)}-{os.cpu_count()}c"
    assert code == 0 and _check(document, "baseline embedded-default")["detail"].startswith(
        f"no reviewed baseline for runner profile {profile} "
    )


def test_a_baseline_measured_with_another_driver(tmp_path: Path) -> None:
    write_config(tmp_path)
    smi = fake_smi.install(tmp_path / "bin", fake_smi.gpus(2))
    document = json.loads(AMD_BASELINE.read_text())
    document |= {"profile": "h200x2", "scenario": "tiny"}
    document["fingerprint"] = {
        "gpu": "NVIDIA H200",
        "gpu_count": "2",
        "driver": "570.86.15",
        "cuda": "12.8",
    }
    path = tmp_path / "baselines" / "h200x2" / "tiny.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(document))
    code, document = _doctor(tmp_path, env=smi)
    assert code == 0, document
    check = _check(document, "baseline tiny")
    assert check["status"] == "warn" and "driver: 570.86.15 -> 580.159.04" in check["detail"]
    assert "engine: unset -> embedded" in check["detail"]  # a field the baseline lacks differs too
    assert "gpu:" not in check["detail"] and "cuda:" not in check["detail"]


@pytest.mark.slow
def test_the_predicted_fingerprint_is_the_one_a_run_records(
    recorded_project: RecordedProject, tmp_path: Path
) -> None:
    """Real runs, approved as the baseline (the session's recorded project): doctor finds every
    field equal; under another CPU, exactly that field differs."""
    require_unshare()
    recorded_project.copy_to(tmp_path)
    (baseline,) = (tmp_path / "baselines").glob("*/tiny.json")

    path = f"{tmp_path / 'none'}:{os.environ['PATH']}"
    code, document = _doctor(tmp_path, env={"CI": "true", "PATH": path})
    check = _check(document, "baseline tiny")
    assert code == 0 and check["status"] == "ok", document
    assert check["detail"] == (
        f"the run will be judged against the reviewed baseline {baseline} (3 approved run(s)): "
        "its fingerprint matches this machine's"
    )
    recorded_cpu = json.loads(baseline.read_text())["fingerprint"]["cpu"]
    profile = ("--profile", baseline.parent.name)
    code, document = _doctor(tmp_path, *profile, cpuinfo=fake_cpuinfo(tmp_path))
    assert _check(document, "baseline tiny")["detail"].startswith(
        f"{baseline} was measured in another environment (cpu: {recorded_cpu} -> {FAKE_CPU}): "
    )


def _history(folder: Path) -> Path:
    folder.mkdir()
    close_history(open_history(f"sqlite:///{folder / 'history.db'}"))
    return folder / "history.db"


def test_a_history_on_a_read_only_mount(tmp_path: Path) -> None:
    write_config(tmp_path)
    db = _history(tmp_path / "mounted")
    code, document = _doctor(
        tmp_path, "--no-gate", "--db", f"sqlite:///{db}", read_only=(db.parent,)
    )
    assert code == 64, document
    check = _check(document, "history")
    assert check["status"] == "fail" and check["exit_code"] == 64
    assert check["detail"] == f"{db}: cannot be opened for writing (Read-only file system)"
    assert check["fix"].startswith("it lies on a read-only mount: remount it read-write")
    assert check["fix"].endswith("or point the history elsewhere with --db or PERFGATE_DB_URL")


def test_an_immutable_history_file(tmp_path: Path) -> None:
    write_config(tmp_path)
    db = _history(tmp_path / "runs")
    before = sorted(p.name for p in db.parent.iterdir())
    with immutable(db):
        code, document = _doctor(tmp_path, "--no-gate", "--db", f"sqlite:///{db}")
    assert code == 64, document
    check = _check(document, "history")
    assert check["status"] == "fail"
    assert check["detail"] == f"{db}: cannot be opened for writing (Operation not permitted)"
    assert "`chattr -i -a` it" in check["fix"] and "--db or PERFGATE_DB_URL" in check["fix"]
    assert sorted(p.name for p in db.parent.iterdir()) == before


@pytest.mark.slow
def test_gpus_busy_for_a_gpu_scenario_are_an_infrastructure_failure(tmp_path: Path) -> None:
    write_config(tmp_path, ON_CUDA)
    smi = fake_smi.install(tmp_path / "bin", fake_smi.gpus(2, **{"1": {"memory.used": "9000"}}))
    code, document = _doctor(tmp_path, "--no-gate", env=smi)
    assert code == 69, document
    assert "gpus: 2 x NVIDIA H200, driver 580.159.04, CUDA 12.8" in _checks(document, "ok")
    (failed,) = [c for c in document["checks"] if c["status"] == "fail"]
    assert (
        failed["detail"]
        == "GPU 1 (NVIDIA H200) is busy: 9000 of 143771 MiB in use (an idle GPU shows at most 1024)"
    )
    assert failed["fix"].startswith("wait for the work on GPU 1 to end, or stop it")
    write_config(tmp_path)  # the same GPUs only warn when the scenario runs on the CPU
    code, document = _doctor(tmp_path, "--no-gate", env=smi)
    assert code == 0 and len(_checks(document, "warn")) == 1


def test_a_way_to_read_the_gpus_that_does_not_exist(tmp_path: Path) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--no-gate", env={"PERFGATE_GPU_READER": "nvidia_smi"})
    assert code == 64, document
    assert _check(document, "gpus") == {
        "name": "gpus",
        "status": "fail",
        "detail": "PERFGATE_GPU_READER: 'nvidia_smi' is not a way to read the GPUs",
        "exit_code": 64,
        "fix": "set it to auto, nvml, nvidia-smi, or unset it",
    }


def test_a_gpu_scenario_on_this_machine_without_gpus(tmp_path: Path) -> None:
    _require_no_gpu()
    write_config(tmp_path, ON_CUDA + ON_CPU_TOO)
    code, document = _doctor(tmp_path, "--no-gate", "--scenario", "tiny")
    assert code == 69, document
    (failed,) = [c for c in document["checks"] if c["status"] == "fail"]
    assert failed["name"] == "gpus" and failed["exit_code"] == 69
    assert (
        failed["detail"]
        == 'scenario tiny needs a GPU (device = "cuda"), and this machine has none (no nvidia-smi on PATH)'
    )
    assert failed["fix"] == (
        "run it on a GPU machine, or select a CPU scenario with `--scenario NAME` (tiny-cpu in perfgate.toml)"
    )
    code, document = _doctor(tmp_path, "--no-gate", "--scenario", "tiny-cpu")
    assert code == 0, document


def test_sglang_where_it_is_not_installed(tmp_path: Path) -> None:
    """Without SGLang its release is unknown: the baseline is compared on what is known."""
    _require_no_gpu()
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed here")
    write_config(tmp_path, ON_CUDA)
    baseline = tmp_path / "baselines" / "laptop" / "tiny.json"
    baseline.parent.mkdir(parents=True)
    document = json.loads(AMD_BASELINE.read_text()) | {"profile": "laptop", "scenario": "tiny"}
    baseline.write_text(json.dumps(document))  # a file names the profile and scenario of its path
    code, document = _doctor(tmp_path, "--engine", "sglang", "--profile", "laptop")
    assert code == 64, document
    engine = _check(document, "engine tiny")
    assert engine["status"] == "fail" and engine["exit_code"] == 64
    assert engine["detail"].startswith("scenarios.tiny.python: SGLang is not installed in ")
    assert engine["fix"].startswith("pip install sglang==")
    gpus = _check(document, "gpus")
    assert gpus["detail"].startswith('scenario tiny needs a GPU (engine = "sglang")')
    assert gpus["fix"] == "run it on a GPU machine, or without `--engine sglang`"
    check = _check(document, "baseline tiny")
    assert check["status"] == "warn" and "engine: embedded -> sglang" in check["detail"]
    assert "engine_version" not in check["detail"] and "torch:" not in check["detail"]


def test_an_unreachable_history_and_a_bad_config(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    write_config(tmp_path)
    code, document = _doctor(
        tmp_path, "--no-gate", "--db", "postgresql://perfgate@127.0.0.1:9/none"
    )
    assert code == 69, document
    (failed,) = _checks(document, "fail")
    assert failed.startswith("history: cannot reach the history database")
    assert "PERFGATE_DB_URL" in _check(document, "history")["fix"]
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
    result = perfgate_main(
        "doctor", "--profile", "laptop", env={**LOCAL, "CI": "true"}, cwd=tmp_path
    )
    assert result.returncode == 64
    lines = result.stdout.splitlines()
    assert lines[-1] == "perfgate doctor: 1 problem(s), exit 64"
    (at,) = [i for i, line in enumerate(lines) if line.startswith("  FAIL  baseline tiny")]
    assert (
        lines[at + 1].strip().startswith("fix: record on this runner with `perfgate run --no-gate")
    )


def test_a_history_inside_the_checkout_is_a_warning_in_ci(tmp_path: Path) -> None:
    write_config(tmp_path)
    code, document = _doctor(tmp_path, "--no-gate", env={"GITHUB_WORKSPACE": str(tmp_path)})
    assert code == 0
    (warned,) = [c for c in document["checks"] if c["status"] == "warn"]
    assert "history.db is inside the job's checkout" in warned["detail"]
    assert "PERFGATE_DB_URL" in warned["fix"]


@pytest.mark.parametrize("engine", ["embedded", "sglang"])
def test_torch_is_needed_only_where_a_scenario_runs_the_embedded_engine(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    from perfgate.config import Scenario
    from perfgate.runner import doctor
    from perfgate.spec.options import GateOptions

    absent = ("torch", "safetensors")
    monkeypatch.setattr(doctor, "_installed", lambda name: None if name in absent else "1.0")
    machine = doctor.Machine(GateOptions(), {})
    machine.scenarios = [
        Scenario(name="s", engine=engine, model="m", draft="d", steps=3, topk=1, draft_tokens=4)
    ]
    torch = {c.name: c for c in doctor.check_python(machine)}["torch"]
    if engine == "embedded":
        assert torch.status == "fail" and torch.exit_code == 64, torch
        assert torch.detail == (
            "torch and safetensors not installed for perfgate, and the embedded engine needs "
            "them (s)"
        )
        assert torch.fix == "pip install 'perfgate[embedded]'"
    else:
        assert torch.status == "ok", torch
        assert torch.detail.startswith("torch not installed: only the embedded engine needs it")


@pytest.mark.parametrize("approved_on", ["gpus-elsewhere", "gpus-here"])
def test_a_baseline_none_of_whose_runs_ran_on_this_machine_is_a_warning(
    tmp_path: Path, approved_on: str
) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    gpus = GpuInfo("NVIDIA H100 80GB HBM3", "580.159.04", "13.0", 1, machine="gpus-here")
    predicted = predict_fingerprint(scenario, None, gpus, {}).fingerprint
    baseline = _reviewed(predicted | {"machine": approved_on})  # the run it approved ran there
    machine = Machine(GateOptions(), {}, gpus=gpus)
    check = _judge_baseline(machine, "baseline tiny", scenario, baseline, gpus, True, "h100x1")
    if approved_on == "gpus-here":
        assert check.status == "ok" and "ran none of them" not in check.detail
        return
    assert check.status == "warn" and check.exit_code == 0  # a warning, even in CI
    assert "(1 approved run(s)): its fingerprint matches this machine's" in check.detail
    assert check.detail.endswith(
        "; this run's machine, gpus-here, ran none of them (they ran on gpus-elsewhere): a "
        "machine's own speed is not in their spread; approve runs of this machine too"
    )
    assert check.fix.startswith("to add this machine's runs, record on this runner with ")


def test_three_approved_runs_of_this_machine_are_what_its_run_is_judged_by(
    tmp_path: Path,
) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    gpus = GpuInfo("NVIDIA H100 80GB HBM3", "580.159.04", "13.0", 1, machine="gpus-here")
    predicted = predict_fingerprint(scenario, None, gpus, {}).fingerprint
    baseline = _reviewed(predicted | {"machine": "gpus-elsewhere"})
    run = baseline.runs[0]
    for run_id in (2, 3, 4):  # the same figures, approved again as runs of this machine
        baseline = approve_run(
            baseline,
            profile=baseline.profile,
            scenario=baseline.scenario,
            fingerprint=predicted | {"machine": "gpus-here"},
            samples=run.samples,
            phase_ms=run.phase_ms,
            tolerances=baseline.tolerances,
            gated=baseline.gated,
            run_id=run_id,
            commit="c0",
            approved_by="alice",
            reason="r",
        )
    machine = Machine(GateOptions(), {}, gpus=gpus)
    check = _judge_baseline(machine, "baseline tiny", scenario, baseline, gpus, True, "h100x1")
    assert check.status == "ok", check
    assert "(4 approved run(s)): its fingerprint matches this machine's" in check.detail
    assert check.detail.endswith(
        "; by the 3 of this run's machine, gpus-here, alone: other machines' speed is not in "
        "its reference"
    )


def test_the_predicted_torch_is_the_one_the_embedded_server_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server reports ``torch.__version__``; a CUDA build's metadata may lack its local part
    (on an H100: 2.11.0 against 2.11.0+cu130), and doctor then called a matching baseline
    another environment. Doctor reads it from torch's version.py, without importing torch."""
    import importlib.machinery
    import importlib.util

    from perfgate import fingerprint
    from perfgate.runner.predict import predict_server

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(fake)]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: spec if name == "torch" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(fingerprint, "_installed", lambda name: "2.11.0")  # the metadata's
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    server = predict_server(scenario, {})
    assert server.info["torch_version"] == "2.11.0+cu130" and "torch" not in server.unchecked
    assert predict_fingerprint(scenario, server, None, {}).fingerprint["torch"] == "2.11.0+cu130"


def test_the_predicted_torch_here_is_torchs_own_version() -> None:
    import torch

    from perfgate.runner.predict import _server_torch

    assert _server_torch() == torch.__version__
