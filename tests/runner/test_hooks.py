"""The job hooks against real processes: leftovers found and ended, busy or sick GPUs refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.devices import detect_gpus
from perfgate.engines.processes import read_process
from perfgate.fingerprint import collect_fingerprint

from .. import fake_smi
from ..conftest import REPO, write_config
from .conftest import run_cli

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def _alive(pid: int) -> bool:
    found = read_process(pid)
    return found is not None and found.alive


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def _spawned(argv: list[str], env: dict[str, str], **kwargs) -> Iterator[subprocess.Popen[str]]:  # type: ignore[no-untyped-def]
    """A detached process (its own session, as a job's leftover is); killed at the end regardless."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    with subprocess.Popen(argv, env=full, start_new_session=True, text=True, **kwargs) as process:
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _hook_env(tmp_path: Path, runner_name: str, gpus: list, **smi) -> dict[str, str]:  # type: ignore[type-arg]
    (tmp_path / "temp").mkdir(exist_ok=True)
    return {
        "RUNNER_NAME": runner_name,
        "RUNNER_TEMP": str(tmp_path / "temp"),
        "GITHUB_ENV": str(tmp_path / "github_env"),
        **fake_smi.install(tmp_path / "bin", gpus, **smi),
    }


def test_job_started_ends_the_servers_an_abandoned_job_left(
    tmp_path: Path, runner_name: str
) -> None:
    config = write_config(tmp_path)
    mine = {"RUNNER_NAME": runner_name}
    job = [
        sys.executable,
        str(HERE / "abandoned_job.py"),
        str(config),
        str(tmp_path / "server.log"),
    ]
    title = ["bash", "-c", 'exec -a "sglang::scheduler_TP0" sleep 600']  # SGLang's process title
    with (
        _spawned(job, mine, stdout=subprocess.PIPE) as abandoned,
        _spawned(title, mine) as scheduler,
        _spawned(title, {"RUNNER_NAME": runner_name + "-other"}) as other_runners,
        _spawned(["sleep", "600"], mine) as not_a_server,
    ):
        assert abandoned.stdout is not None
        _, port, supervisor = abandoned.stdout.readline().split()
        assert _port_open(int(port))
        result = run_cli(
            "runner",
            "job-started",
            "--json",
            "--wait-s",
            "0",
            "--grace-s",
            "5",
            env=_hook_env(tmp_path, runner_name, fake_smi.gpus(8)),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        ended = json.loads(result.stdout)["ended"]
        assert any(
            f"pid {supervisor} " in line and "launched by perfgate (tiny/plain/" in line
            for line in ended
        ), ended
        assert any("perfgate.engines.embedded.server" in line for line in ended), ended
        assert any(f"pid {scheduler.pid} " in line for line in ended), ended
        assert not _alive(int(supervisor)) and not _alive(scheduler.pid)
        assert not _port_open(int(port)), "the server still listens"
        assert _alive(other_runners.pid), "another runner's server was ended"
        assert _alive(not_a_server.pid), "a process that is no server was ended"
        assert abandoned.poll() is None, "the job itself is the runner's to end, not the hook's"


def test_job_started_saves_the_gpu_settings_for_the_fingerprint(
    tmp_path: Path, runner_name: str
) -> None:
    env = _hook_env(tmp_path, runner_name, fake_smi.gpus(8))
    result = run_cli("runner", "job-started", "--wait-s", "0", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    state = tmp_path / "temp" / "perfgate-machine-state.json"
    assert (tmp_path / "github_env").read_text() == f"PERFGATE_MACHINE_STATE={state}\n"
    assert json.loads(state.read_text())["fingerprint"]["gpu_sm_clock_max_mhz"] == "1980"
    assert (
        "GPU 7 NVIDIA H200: 1 MiB used, driver 580.159.04, SM clock 345.0/1980.0 MHz"
        in result.stdout
    )


def test_a_state_file_that_cannot_be_written_is_refused_before_anything_is_ended(
    tmp_path: Path, runner_name: str
) -> None:
    title = ["bash", "-c", 'exec -a "sglang::scheduler_TP0" sleep 600']
    (tmp_path / "folder").mkdir()
    with _spawned(title, {"RUNNER_NAME": runner_name}) as leftover:
        env = _hook_env(tmp_path, runner_name, fake_smi.gpus(8))
        result = run_cli(
            "runner",
            "job-started",
            "--state-file",
            "folder",
            "--wait-s",
            "0",
            env=env,
            cwd=tmp_path,
        )
        assert result.returncode == 64, result.stdout + result.stderr
        assert result.stderr == (
            "perfgate: error: folder: is a folder, but --state-file names a file to write; name "
            "a file in it (--state-file folder/NAME), or pass another --state-file PATH\n"
        )
        assert _alive(leftover.pid), "a leftover was ended although the hook was refused"
    assert list((tmp_path / "folder").iterdir()) == [] and not (tmp_path / "github_env").exists()


def test_the_fingerprint_takes_the_saved_settings(
    tmp_path: Path, runner_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _hook_env(tmp_path, runner_name, fake_smi.gpus(8, **{"2": {"power.limit": "500.00"}}))
    assert run_cli("runner", "job-started", "--wait-s", "0", env=env, cwd=tmp_path).returncode == 0
    for name in ("PATH", "FAKE_NVIDIA_SMI", "PERFGATE_GPU_READER"):
        monkeypatch.setenv(name, env[name])
    scenario = next(iter(load_config(write_config(tmp_path)).scenarios.values()))
    state = {"PERFGATE_MACHINE_STATE": str(tmp_path / "temp" / "perfgate-machine-state.json")}
    printed = collect_fingerprint(scenario, {}, detect_gpus(), environ=state)
    assert printed["gpu"] == "NVIDIA H200" and printed["gpu_count"] == "8"
    assert printed["gpu_power_limit_w"] == "700,700,500,700,700,700,700,700"
    assert printed["gpu_app_clock_mhz"] == "1785" and printed["driver"] == "580.159.04"
    assert "gpu_power_limit_w" not in collect_fingerprint(scenario, {}, detect_gpus(), environ={})


def test_a_busy_gpu_fails_the_job_and_says_which_and_why(tmp_path: Path, runner_name: str) -> None:
    gpus = fake_smi.gpus(8, **{"3": {"memory.used": "40960", "utilization.gpu": "97"}})
    apps = [{"pid": str(os.getpid()), "gpu_uuid": "GPU-00000003-fake", "used_memory": "40900"}]
    env = _hook_env(tmp_path, runner_name, gpus, apps=apps)
    result = run_cli("runner", "job-started", "--wait-s", "0", env=env, cwd=tmp_path)
    assert result.returncode == 69, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (
        (
            "::error title=perfgate job-started::GPU 3 (NVIDIA H200) is busy: 40960 of 143771 MiB in use "
            f"(an idle GPU shows at most 1024); 97%25 utilised; held by pid {os.getpid()}"  # %25: escaped
        )
        in lines
    )
    assert any(line.startswith(f"  pid {os.getpid()} on GPU-00000003-fake: ") for line in lines), (
        lines
    )
    assert lines[-1] == "perfgate job-started: the job cannot run on this machine (exit 69)"
    assert _alive(os.getpid())  # not this runner's: named, never ended


def test_an_unhealthy_or_missing_gpu_fails_the_job(tmp_path: Path, runner_name: str) -> None:
    gpus = fake_smi.gpus(7, **{"5": {"clocks_event_reasons.active": "0x0000000000000041"}})
    env = {**_hook_env(tmp_path, runner_name, gpus), "PERFGATE_EXPECT_GPUS": "8"}
    result = run_cli("runner", "job-started", env=env, cwd=tmp_path)
    assert result.returncode == 69
    assert "::error title=perfgate job-started::7 GPU(s) visible, 8 expected" in result.stdout
    assert (
        "GPU 5 (NVIDIA H200) is unhealthy: clocks held down by hw_thermal_slowdown" in result.stdout
    )
    assert "reset the GPU" in result.stdout


def test_outside_a_runner_nothing_is_ended(tmp_path: Path) -> None:
    title = ["bash", "-c", 'exec -a "sglang::scheduler_TP0" sleep 600']
    with _spawned(title, {"RUNNER_NAME": ""}) as scheduler:
        env = {**fake_smi.install(tmp_path / "bin", fake_smi.gpus(1)), "RUNNER_NAME": ""}
        result = run_cli("runner", "job-completed", env=env, cwd=tmp_path)
        assert result.returncode == 0
        assert "RUNNER_NAME is unset (not a runner's job): no process ended" in result.stdout
        time.sleep(0.2)
        assert _alive(scheduler.pid)


def test_job_completed_ends_leftovers_and_never_fails(tmp_path: Path, runner_name: str) -> None:
    title = ["bash", "-c", 'exec -a "python -m sglang.launch_server --port 30000" sleep 600']
    with _spawned(title, {"RUNNER_NAME": runner_name}) as server:
        env = _hook_env(tmp_path, runner_name, fake_smi.gpus(8, **{"0": {"memory.used": "9000"}}))
        result = run_cli("runner", "job-completed", "--grace-s", "2", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (
            f"perfgate job-completed: ended pid {server.pid} (an inference server's command line)"
            in result.stdout
        )
        assert not _alive(server.pid)


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    from dataclasses import replace

    from perfgate.engines.processes import end_processes

    with _spawned(["sleep", "600"], {}) as unrelated:
        found = read_process(unrelated.pid)
        assert found is not None and found.started is not None
        # What the hook found under this pid was another process, started earlier; it ended
        # and the kernel gave its pid to this one.
        earlier = replace(found, started=found.started - 1)
        assert end_processes([earlier], grace_s=0.5) == []
        time.sleep(0.2)
        assert _alive(unrelated.pid), "a process that was not the one found got a signal"
        assert end_processes([found], grace_s=5) == []
        assert not _alive(unrelated.pid)


def test_a_server_whose_runner_name_was_cleared_does_not_escape(
    tmp_path: Path, runner_name: str
) -> None:
    work = tmp_path / "actions-runner" / "_work"
    (work / "repo").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    title = ["bash", "-c", 'exec -a "sglang::scheduler_TP0" sleep 600']
    runner_vars = ("RUNNER_NAME", "RUNNER_TEMP", "RUNNER_WORKSPACE", "GITHUB_WORKSPACE")
    bare = {k: v for k, v in os.environ.items() if k not in runner_vars}
    bare["PYTHONPATH"] = str(REPO)

    def spawn(cwd: Path, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            title, cwd=cwd, env={**bare, **env}, start_new_session=True, text=True
        )

    servers = {
        # `env -u RUNNER_NAME` in a step: the job's other variables are still there.
        "unset, the job's folders": spawn(elsewhere, RUNNER_TEMP=str(work / "_temp")),
        # Everything cleared (`env -i`), started in the job's workspace.
        "cleared, in the workspace": spawn(work / "repo"),
        # Not this runner's: cleared and elsewhere, or another runner's folders.
        "cleared, elsewhere": spawn(elsewhere),
        "another runner's": spawn(work / "repo", RUNNER_TEMP=str(tmp_path / "other" / "_temp")),
    }
    try:
        env = {
            **_hook_env(tmp_path, runner_name, fake_smi.gpus(1)),
            "RUNNER_TEMP": str(work / "_temp"),
            "RUNNER_WORKSPACE": str(work / "repo"),
        }
        (work / "_temp").mkdir()
        result = run_cli("runner", "job-completed", "--grace-s", "2", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        for what, process in servers.items():
            mine = what in ("unset, the job's folders", "cleared, in the workspace")
            assert (f"ended pid {process.pid} " in result.stdout) == mine, (what, result.stdout)
            assert _alive(process.pid) != mine, what
    finally:
        for process in servers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@pytest.mark.parametrize(
    ("args", "variable", "said"),
    [
        (
            ["job-started", "--expect-gpus", "-1"],
            None,
            "--expect-gpus: is -1, not a count of GPUs from 1",
        ),
        (["job-started"], "junk", "PERFGATE_EXPECT_GPUS: is 'junk', not a count of GPUs from 1"),
        (["job-started", "--wait-s", "-1"], None, "--wait-s: is -1.0, not a finite number from 0"),
        (["job-started", "--max-memory-mib", "nan"], None, "--max-memory-mib: is nan"),
        (
            ["job-started", "--max-utilization", "101"],
            None,
            "--max-utilization: is 101.0, not a finite number from 0 to 100",
        ),
        (
            ["job-completed", "--grace-s", "-1"],
            None,
            "--grace-s: is -1.0, not a finite number from 0",
        ),
    ],
)
def test_a_hook_s_bad_number_is_refused_naming_it(
    tmp_path: Path, runner_name: str, args: list[str], variable: str | None, said: str
) -> None:
    """A GPU count below one failed the job as infrastructure (69), junk in the variable was
    read as no count, and negative waits were taken."""
    env = _hook_env(tmp_path, runner_name, fake_smi.gpus(1))
    if variable is not None:
        env["PERFGATE_EXPECT_GPUS"] = variable
    result = run_cli("runner", *args, env=env, cwd=tmp_path)
    assert result.returncode == 64, result.stdout + result.stderr
    assert said in result.stderr, result.stderr
