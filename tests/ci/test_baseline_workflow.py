"""The baseline-update workflow's jobs, run in order on this machine.

The `reviewer` job reads the run's deployment approvals through `gh api` (a stand-in here),
the `approve` job records that reviewer, never the person who started the update, and refuses
an update only they approved; the `pull-request` job pushes a branch and says how to open its
pull request: no workflow token opens or approves one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.results import RunContext
from perfgate.store import open_history, record_run

from ..factories import measurement, record
from . import fake_gh
from .conftest import load_workflow
from .job_runner import JobRunner, StepResult
from .test_job_steps import _make_workspace

pytestmark = pytest.mark.slow

APPROVALS_PATH = "repos/acme/gate/actions/runs/4242/approvals"


def _approval(login: str, state: str = "approved") -> dict[str, Any]:
    return {
        "environments": [{"id": 7, "name": "baseline-approval"}],
        "state": state,
        "comment": "looks right",
        "user": {"login": login, "type": "User"},
    }


def _runner(workspace: Path, temp: Path, gh_env: dict[str, str], approvals: str) -> JobRunner:
    temp.mkdir(parents=True, exist_ok=True)
    environ = {
        "PATH": gh_env["PATH"],
        "FAKE_GH_STATE": gh_env["FAKE_GH_STATE"],
        "HOME": str(temp),
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "workflow_dispatch",
        "GITHUB_REPOSITORY": "acme/gate",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_REF": "refs/heads/main",
    }
    expressions = {
        "inputs.runs": "1",
        "inputs.reason": "new kernel",
        "github.actor": "alice",
        "github.triggering_actor": "alice",
        "github.token": "test-token",
        "github.run_id": "4242",
        "vars.PERFGATE_PROFILE": "",
        "runner.temp": str(temp),
        "steps.approvals.outputs.approvals": "",
        "needs.reviewer.outputs.approvals": approvals,
    }
    return JobRunner(workspace, temp, environ, expressions, {})


def _workspace(folder: Path) -> Path:
    workspace = _make_workspace(folder)
    sessions = open_history(f"sqlite:///{workspace / 'history.db'}")
    context = RunContext(commit="a" * 40, branch="main", ci_url="https://ci.example/runs/1")
    with sessions.begin() as session:
        record_run(session, replace(record(measurement("tiny")), context=context))
    return workspace


def _reviewer_then_approve(
    tmp_path: Path, approvals: list[dict[str, Any]]
) -> tuple[JobRunner, dict[str, StepResult], Path]:
    workspace = _workspace(tmp_path / "workspace")
    gh_env = fake_gh.install(
        tmp_path / "gh", [], {APPROVALS_PATH: {"status": 200, "body": approvals}}
    )
    jobs = load_workflow("baseline-update.yml")["jobs"]
    reviewer = _runner(workspace, tmp_path / "reviewer", gh_env, "")
    (read,) = reviewer.run_job(jobs["reviewer"])
    assert read.returncode == 0, read.output
    runner = _runner(workspace, tmp_path / "approve", gh_env, read.outputs["approvals"])
    steps = {step.name: step for step in runner.run_job(jobs["approve"])}
    return runner, steps, workspace


def test_the_reviewer_of_the_deployment_is_recorded(tmp_path: Path) -> None:
    runner, steps, workspace = _reviewer_then_approve(tmp_path, [_approval("bob")])
    assert not runner.failed, {name: step.output[-2000:] for name, step in steps.items()}
    (baseline,) = (workspace / "baselines").glob("*/tiny.json")
    assert json.loads(baseline.read_text())["runs"][0]["approved_by"] == "bob"
    body = (workspace / ".perfgate" / "baseline-pr.md").read_text()
    assert body.startswith("Baseline update approved by `bob`, requested by `alice`")
    uploaded = {
        p.relative_to(workspace).as_posix() for p in steps["Upload the new baselines"].uploaded
    }
    assert uploaded == {"baselines", ".perfgate/baseline-pr.md"}


def test_an_update_its_requester_approved_alone_is_refused(tmp_path: Path) -> None:
    runner, steps, workspace = _reviewer_then_approve(tmp_path, [_approval("alice")])
    assert runner.failed and steps["Approve the runs"].returncode == 64
    assert "approved only by alice, who started the update" in steps["Approve the runs"].output
    assert not (workspace / "baselines").exists()
    assert not steps["Upload the new baselines"].ran


def test_the_pull_request_is_opened_by_a_person_not_by_the_workflow(tmp_path: Path) -> None:
    jobs = load_workflow("baseline-update.yml")["jobs"]
    job = jobs["pull-request"]
    assert job["permissions"] == {"contents": "write"}  # no pull-requests: write
    for name, other in jobs.items():
        assert "pull-requests" not in other["permissions"], name
    origin, workspace = tmp_path / "origin.git", tmp_path / "checkout"
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run([*git, "clone", "-q", str(origin), str(workspace)], check=True)
    (workspace / "README.md").write_text("gate\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["add", "README.md"], [*ident, "commit", "-qm", "first"], ["push", "-q"]):
        subprocess.run(["git", *command], cwd=workspace, check=True)
    approved = tmp_path / "pr" / "approved"
    (approved / "baselines" / "h200x8").mkdir(parents=True)
    (approved / "baselines" / "h200x8" / "tiny.json").write_text("{}\n")
    (approved / ".perfgate").mkdir()
    (approved / ".perfgate" / "baseline-pr.md").write_text("Baseline update approved by `bob`\n")
    gh_env = fake_gh.install(tmp_path / "gh", [])
    runner = _runner(workspace, tmp_path / "pr", gh_env, "")
    runner.env["PATH"] += ":" + str(Path(sys.executable).parent)
    steps = {step.name: step for step in runner.run_job(job)}
    opened = steps["Push the branch"]
    assert opened.returncode == 0, opened.output
    branches = subprocess.run(
        ["git", "branch", "--list"], cwd=origin, capture_output=True, text=True, check=True
    ).stdout
    assert "perfgate/baseline-update-4242" in branches
    assert (
        "https://github.com/acme/gate/compare/main...perfgate/baseline-update-4242?expand=1"
        in opened.summary
    )
    assert "Baseline update approved by `bob`" in opened.summary
