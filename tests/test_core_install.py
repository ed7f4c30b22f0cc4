"""`pip install perfgate` without the embedded engine's extra: what a CI job that only judges,
records and reports installs.

One fresh virtual environment per session: perfgate's wheel, built from this checkout, installed
with its dependencies as pip resolves them (no torch, no safetensors). A history written here
through the store is then listed, shown, approved, judged and reported by that install, and the
gate suites refuse the embedded scenario (exit 64, naming the extra) before any server starts;
a watcher on the import system (a sitecustomize on PYTHONPATH, in every process of the tree)
records any attempt to import torch, safetensors or triton, and there must be none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path

import pytest

from perfgate.gate import Status
from perfgate.pipeline import record_linked
from perfgate.results import RunContext, RunRecord
from perfgate.store import open_history

from .built_wheel import session_wheel
from .conftest import TINY_SCENARIO, write_config
from .hang import HANG_S
from .test_judging import noisy

pytestmark = pytest.mark.slow

ENGINE_ONLY = ("torch", "safetensors", "triton")
WATCHER = f"""
import os, sys

class _EngineImportWatcher:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {ENGINE_ONLY!r}:
            with open(os.environ["PERFGATE_IMPORT_LOG"], "a") as log:
                log.write(f"{{name}} by {{' '.join(sys.argv)}}\\n")
        return None

sys.meta_path.insert(0, _EngineImportWatcher())
"""


def _run(
    argv: list[str], cwd: Path, timeout: float = HANG_S, **env: str
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PERFGATE_DB_URL", "PERFGATE_PROFILE", "CI")
        and k != "PYTHONDONTWRITEBYTECODE"  # a user's Python caches the bytecode it compiles
        and not k.startswith("PYTEST_")
    }
    return subprocess.run(
        argv, cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=timeout
    )


def _checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def core(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A virtual environment holding perfgate as `pip install perfgate` gives it; its bin/."""
    root = tmp_path_factory.mktemp("core-install")
    # The wheel `pip install perfgate` would fetch, built once for the suite (tests/built_wheel.py).
    wheel = session_wheel(request.config, tmp_path_factory)
    # The environment without a pip of its own (ensurepip alone cost 3.8 CPU s): this
    # interpreter's pip installs into it (`--python`) as the environment's own would.
    venv = root / "venv"
    _checked(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root))
    # --no-compile: pip would compile every module it installs (6 of the install's 9 CPU s, the
    # tests of numpy and Pygments' lexers among them); instead the first process that imports
    # a module compiles it and caches its bytecode for the others (`_run`), as a user's does.
    install = ["install", "--quiet", "--no-compile", str(wheel)]
    _checked(_run([*_pip(venv / "bin"), *install], root, 600))
    yield venv / "bin"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose history holds five runs of its embedded scenario (ids 1-5)."""
    folder = tmp_path_factory.mktemp("core-project")
    write_config(folder, TINY_SCENARIO)
    clean = [RunRecord(noisy(seed), RunContext(commit="c0"), (), Status.PASS) for seed in range(5)]
    sessions = open_history(f"sqlite:///{folder / 'history.db'}")
    with sessions.begin() as session:
        record_linked(session, clean)
    (folder / "watch").mkdir()
    (folder / "watch" / "sitecustomize.py").write_text(WATCHER)
    return folder


def _perfgate(core: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _watched([str(core / "perfgate"), *args], project)


def _watched(argv: list[str], project: Path) -> subprocess.CompletedProcess[str]:
    """`argv` run in `project`, every Python process of it watched for engine imports."""
    log = project / "engine-imports.log"
    return _run(argv, project, PYTHONPATH=str(project / "watch"), PERFGATE_IMPORT_LOG=str(log))


def _pip(core: Path) -> list[str]:
    """This interpreter's pip, acting on the environment of `core` (its bin/)."""
    return [sys.executable, "-m", "pip", "--python", str(core / "python")]


def test_the_core_install_brings_no_engine_package(core: Path) -> None:
    # What `pip list` lists, read from the environment's own metadata without starting pip.
    (site,) = core.parent.glob("lib/python*/site-packages")
    names = {found.metadata["Name"].lower() for found in distributions(path=[str(site)])}
    assert "perfgate" in names and "numpy" in names
    assert not names & {*ENGINE_ONLY, "sympy", "networkx"}, sorted(names)
    assert not [n for n in names if n.startswith(("nvidia-", "cuda-"))], sorted(names)


def test_judging_recording_and_reporting_without_torch(core: Path, project: Path) -> None:
    log = project / "engine-imports.log"
    log.unlink(missing_ok=True)
    assert "judge recorded runs again" in _checked(_perfgate(core, project, "--help")).stdout
    listed = _checked(_perfgate(core, project, "history", "list")).stdout
    assert [line.split()[0] for line in listed.splitlines()[1:]] == ["1", "2", "3", "4", "5"]
    assert "verify" in _checked(_perfgate(core, project, "history", "show", "5")).stdout
    approve = ("baseline", "update", "--run", "1", "--run", "2", "--run", "3", "--run", "4")
    _checked(_perfgate(core, project, *approve, "--approved-by", "alice", "--reason", "r"))
    shown = _checked(
        _perfgate(core, project, "baseline", "show", "--scenario", "tiny", "--profile", "cpu")
    ).stdout
    assert "4 approved run" in shown, shown
    judged = _checked(_perfgate(core, project, "gate", "--run", "5", "--json"))
    assert json.loads(judged.stdout)["status"] == "pass", judged.stdout
    _checked(_perfgate(core, project, "report"))
    assert (project / "reports" / "index.html").stat().st_size > 10_000
    assert not log.exists(), log.read_text()


def test_an_embedded_run_is_refused_naming_the_extra_and_ci_reports_it(
    core: Path, project: Path
) -> None:
    log = project / "engine-imports.log"
    log.unlink(missing_ok=True)
    refusal = (
        "scenarios.tiny.engine: the embedded engine needs torch and safetensors, which "
        f"{core / 'python'} does not have: they come with the extra perfgate[embedded]; "
        "pip install 'perfgate[embedded]' in that environment"
    )
    done = _perfgate(core, project, "run", "--report", "")
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stdout == "" and refusal in done.stderr.splitlines()[-1], done.stderr
    # The gate suites under pytest itself: the plugin refuses the session, says why in its
    # section and in the session's pointer, which CI's steps render without torch.
    suites = [str(core / "python"), "-m", "pytest", "--pyargs", "perfgate.suites"]
    done = _watched(suites, project)
    out = done.stdout + done.stderr
    assert done.returncode == 64, out
    assert refusal in out and "starting" not in out, out
    assert not list(project.glob(".perfgate/runs/*/*/*.log")), "a server was started"
    summary = _checked(_perfgate(core, project, "ci", "summary")).stdout
    assert refusal in summary, summary
    _checked(_perfgate(core, project, "ci", "annotations"))
    assert not log.exists(), log.read_text()
