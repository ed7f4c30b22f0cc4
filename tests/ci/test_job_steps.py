"""The perf-gate workflow's steps, run in order on this machine with the embedded engine.

The workspace is what the checkout and the cached environment leave on the runner: this
repository's files, a tiny scenario with its approved baseline, and `.venv` (here, commands
that run this interpreter; `scripts/bootstrap` finds it up to date and installs nothing).
The gate job runs for a pull request, then again with verify made slower (the embedded
server's `PERFGATE_DEBUG_VERIFY_DELAY_MS`); the comment job posts, then updates, one comment.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import (
    HERE_PROFILE,
    REPO,
    SLOW_VERIFY_MS,
    VERDICT_CODES,
    write_config,
)
from ..recorded import RecordedProject
from . import fake_gh
from .conftest import load_workflow
from .job_runner import JobRunner, StepResult

pytestmark = pytest.mark.slow

MARKER = "<!-- perfgate-gate -->"
SHA = "0123456789abcdef0123456789abcdef01234567"


def _shim(path: Path, command: str) -> None:
    path.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    path.chmod(0o755)


def _make_workspace(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("perfgate", "scripts"):
        (folder / name).symlink_to(REPO / name)
    for name in ("pyproject.toml", "requirements-dev.txt"):
        shutil.copy(REPO / name, folder / name)
    venv = folder / ".venv" / "bin"
    venv.mkdir(parents=True)
    _shim(venv / "python", sys.executable)
    _shim(venv / "perfgate", f"{sys.executable} -m perfgate")
    stamp = hashlib.sha256(
        b"".join((folder / n).read_bytes() for n in ("pyproject.toml", "requirements-dev.txt"))
    )
    # What the workflow's scripts/bootstrap writes: the inputs' digest, and the gate's install.
    (folder / ".venv" / ".perfgate-installed").write_text(stamp.hexdigest() + " gate\n")
    write_config(folder)
    return folder


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, recorded_project: RecordedProject) -> Path:
    """The checkout, with an approved baseline for the tiny scenario: the session's recorded
    project (three runs approved; tests/recorded.py), its config, history and baselines.

    One approved run would show nothing of how far launches land apart, and the gate would
    claim nothing from a single run against it.
    """
    folder = _make_workspace(tmp_path_factory.mktemp("workspace"))
    return recorded_project.copy_to(folder)  # its config: a verdict of one run


def _runner(workspace: Path, temp: Path, extra: dict[str, str] | None = None) -> JobRunner:
    temp.mkdir(parents=True, exist_ok=True)
    event = temp / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"repo": {"full_name": "acme/gate"}}}})
    )
    environ = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": str(temp),
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "acme/gate",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_SHA": SHA,
        "GITHUB_REF": "refs/pull/7/merge",
        "GITHUB_REF_NAME": "7/merge",
        "GITHUB_HEAD_REF": "faster-verify",
        "GITHUB_BASE_REF": "main",
        "GITHUB_RUN_ID": "4242",
        "RUNNER_NAME": "gpu-runner-1",
        "RUNNER_OS": "Linux",
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        **(extra or {}),
    }
    expressions = {
        "vars.PERFGATE_PROFILE": "",
        "vars.PERFGATE_PYTEST_ARGS": "",
        "runner.temp": str(temp),
        "github.token": "test-token",
        "github.event.pull_request.number": "7",
    }
    conditions = {
        "!cancelled()": True,
        "!cancelled() && github.event_name == 'pull_request'": True,
        "steps.body.outcome == 'success'": True,
    }
    return JobRunner(workspace, temp, environ, expressions, conditions)


def _gate(
    workspace: Path, temp: Path, extra: dict[str, str] | None = None
) -> tuple[JobRunner, dict[str, StepResult]]:
    workflow = load_workflow("perf-gate.yml")
    runner = _runner(workspace, temp, extra)
    steps = runner.run_job(workflow["jobs"]["gate"])
    return runner, {step.name: step for step in steps}


def _comment(workspace: Path, temp: Path, gh_env: dict[str, str], body_from: Path) -> StepResult:
    job: dict[str, Any] = load_workflow("perf-gate.yml")["jobs"]["comment"]
    # What the download step would leave: the comment body the gate job uploaded.
    (temp / "perfgate-comment").mkdir(parents=True, exist_ok=True)
    shutil.copy(body_from, temp / "perfgate-comment" / "comment.md")
    runner = _runner(workspace, temp, gh_env)
    runner.env["PATH"] = gh_env["PATH"]
    (post,) = [s for s in runner.run_job(job) if s.name == "Post or update the sticky comment"]
    assert post.returncode == 0, post.output
    return post


def test_the_gate_job_passes_then_catches_a_regression(workspace: Path, tmp_path: Path) -> None:
    human = {"id": 1, "issue": 7, "user": {"login": "alice"}, "body": f"{MARKER} quoting the bot"}
    gh_env = fake_gh.install(tmp_path / "gh", [human])

    # The same code: judged, and every step after the suites runs and says what it got (a
    # pass, or what a fivefold swing of this machine's load made of it).
    runner, passed = _gate(workspace, tmp_path / "pass")
    steps = {name: step.output[-2000:] for name, step in passed.items()}
    code = passed["Gate suites"].returncode
    assert code in VERDICT_CODES, steps
    assert runner.failed == (code != 0) and passed["Pre-flight"].returncode == 0, steps
    assert all(step.ran for step in passed.values()), steps
    summary = passed["Job summary"].summary
    outcome = {0: "✅ pass", 1: "❌ regression", 75: "⚠️ inconclusive"}[code]
    assert summary.startswith(f"## perfgate: {outcome} (exit {code})"), summary
    assert (
        f"commit `{SHA[:12]}` · [run, report and logs](https://github.com/acme/gate/actions/runs/4242)"
        in summary
    )
    assert f"| tiny | {HERE_PROFILE} | #" in summary and "✅ 2/2 prompts token-identical" in summary
    assert "| `verify_ms` |" in summary and len(summary.encode()) < 1_000_000
    assert ("::error" in passed["Annotations"].output) == (code == 1)
    uploaded = {p.relative_to(workspace).as_posix() for s in passed.values() for p in s.uploaded}
    assert {
        "reports",
        ".perfgate/last-session.json",
        ".perfgate/runs",
        ".perfgate/comment/comment.md",
    } <= uploaded
    assert (workspace / "reports" / "index.html").is_file()
    first = _comment(
        workspace, tmp_path / "comment-1", gh_env, workspace / ".perfgate/comment/comment.md"
    )
    assert "commented on pull request #7" in first.output

    slower = {"PERFGATE_DEBUG_VERIFY_DELAY_MS": SLOW_VERIFY_MS}
    runner, slow = _gate(workspace, tmp_path / "slow", slower)
    assert runner.failed and slow["Gate suites"].returncode == 1, slow["Gate suites"].output[-3000:]
    assert slow["Job summary"].ran and slow["Annotations"].ran and slow["PR comment body"].ran
    summary = slow["Job summary"].summary
    assert summary.startswith("## perfgate: ❌ regression (exit 1)"), summary
    assert "| `verify_ms` |" in summary and "❌ regression |" in summary
    # tok/s falls 20-fold: a regression, or inconclusive where the baseline's runs scattered
    # under this machine's load (its interval then crosses the tolerance); either way it says why.
    assert "- **why** `output_tok_s` moved: output_tok_s -" in summary and "verify +" in summary
    assert "- equivalence: ✅ 2/2 prompts token-identical" in summary
    errors = [
        line for line in slow["Annotations"].output.splitlines() if line.startswith("::error ")
    ]
    assert any("title=perfgate%3A tiny verify_ms regression::" in line for line in errors), errors
    assert all(f"file=baselines/{HERE_PROFILE}/tiny.json" in line for line in errors), errors
    second = _comment(
        workspace, tmp_path / "comment-2", gh_env, workspace / ".perfgate/comment/comment.md"
    )
    assert "updated comment 2 on pull request #7" in second.output

    posted = fake_gh.comments(gh_env)
    assert posted[0] == human  # someone else's comment with the marker is never edited
    (bot,) = [c for c in posted if c["user"]["login"] == fake_gh.BOT]
    assert bot["body"].startswith(f"{MARKER}\n## perfgate: ❌ regression (exit 1)")


def test_a_failed_pre_flight_still_says_why_in_the_summary(tmp_path: Path) -> None:
    workspace = _make_workspace(tmp_path / "workspace")  # no baseline approved: bad input
    runner, steps = _gate(workspace, tmp_path / "temp")
    assert runner.failed and steps["Pre-flight"].returncode == 64
    assert "no reviewed baseline for scenario 'tiny'" in steps["Pre-flight"].output
    assert "perfgate run --no-gate --scenario tiny" in steps["Pre-flight"].output
    assert not steps["Gate suites"].ran
    assert steps["Job summary"].summary.startswith("## perfgate: ⛔ no verdict")
    assert "::error title=perfgate%3A no verdict::" in steps["Annotations"].output
    assert (workspace / ".perfgate" / "comment" / "comment.md").read_text().startswith(MARKER)
