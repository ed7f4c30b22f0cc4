"""The workflows' safety rules, read from the files: what actionlint and zizmor do not know.

Fork code never reaches the self-hosted runner, tokens are least-privilege, every action is
pinned to a commit, each pull request has its own concurrency group, every job has a
timeout, and no pull-request job writes baselines.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from ..conftest import REPO
from .conftest import WORKFLOWS, load_workflow

PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def _jobs() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path.name, name, job)
        for path in WORKFLOWS
        for name, job in load_workflow(path.name)["jobs"].items()
    ]


def _self_hosted(job: dict[str, Any]) -> bool:
    labels = job["runs-on"]
    return "self-hosted" in (labels if isinstance(labels, list) else [labels])


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_version(path) -> None:  # type: ignore[no-untyped-def]
    uses = [line for line in path.read_text().splitlines() if "uses:" in line]
    assert uses and all(PINNED.match(line) for line in uses), uses


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_token_by_default_and_each_job_names_its_own(path) -> None:  # type: ignore[no-untyped-def]
    workflow = load_workflow(path.name)
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("permissions"), dict) and job["permissions"], name
        assert isinstance(job.get("timeout-minutes"), int), f"{name} has no timeout"


def test_self_hosted_jobs_read_only_never_on_untrusted_triggers() -> None:
    hosted = [(file, name, job) for file, name, job in _jobs() if _self_hosted(job)]
    assert {(file, name) for file, name, _ in hosted} == {
        ("perf-gate.yml", "gate"),
        ("baseline-update.yml", "approve"),
    }
    for file, name, job in hosted:
        assert job["permissions"] == {"contents": "read"}, (file, name)
        triggers = load_workflow(file)["on"]
        assert not {"pull_request_target", "workflow_run", "issue_comment"} & set(triggers)
        assert "secrets." not in yaml.safe_dump(job), (file, name)


def test_fork_pull_requests_never_reach_the_gpu_runner() -> None:
    gate = load_workflow("perf-gate.yml")["jobs"]["gate"]
    assert gate["if"] == (
        "github.event_name == 'push' || "
        "github.event.pull_request.head.repo.full_name == github.repository"
    )


def test_one_concurrency_group_per_pull_request() -> None:
    concurrency = load_workflow("perf-gate.yml")["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert "github.sha" in concurrency["group"]  # pushes to main: one group each, none dropped
    assert load_workflow("baseline-update.yml")["concurrency"]["cancel-in-progress"] is False


def test_only_the_comment_job_may_write_to_pull_requests_and_runs_no_pr_code() -> None:
    jobs = load_workflow("perf-gate.yml")["jobs"]
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    assert jobs["comment"]["runs-on"] == "ubuntu-latest"
    steps = jobs["comment"]["steps"]
    assert not any("checkout" in step.get("uses", "") for step in steps)


def test_no_pull_request_job_writes_baselines() -> None:
    for file in ("perf-gate.yml", "ci.yml"):
        text = (REPO / ".github" / "workflows" / file).read_text()
        assert "baseline update" not in text and "ci approve" not in text, file
        assert "contents: write" not in text, file
    update = load_workflow("baseline-update.yml")
    assert set(update["on"]) == {"workflow_dispatch"}
    # The approval comes first, on a GitHub-hosted job; the GPU job writes only after it.
    assert update["jobs"]["reviewer"]["environment"] == "baseline-approval"
    assert update["jobs"]["approve"]["needs"] == "reviewer"
    for job in ("reviewer", "approve"):
        assert update["jobs"][job]["if"] == "github.ref == 'refs/heads/main'"


def test_the_runner_labels_are_declared_for_actionlint() -> None:
    declared = yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())
    custom = set(declared["self-hosted-runner"]["labels"])
    for file, name, job in _jobs():
        if _self_hosted(job):
            assert set(job["runs-on"]) - {"self-hosted", "linux", "x64"} <= custom, (file, name)


def _owners(path: str) -> list[str]:
    """The owners CODEOWNERS gives `path`: its last matching pattern's (anchored ones here)."""
    owners: list[str] = []
    for line in (REPO / ".github" / "CODEOWNERS").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        pattern, names = words[0], words[1:]
        assert pattern.startswith("/"), f"{pattern}: anchor it, so it means one place"
        prefix = pattern.lstrip("/")
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            owners = names
    return owners


# What decides a verdict, or runs on the GPU runner: a pull request must not change it
# without the owners' review (a green gate from an edited judge, say).
GUARDED = [
    "baselines/h200x8/llama33-70b-eagle3-tp8.json",
    "perfgate.toml",
    "perfgate/gate/judge.py",
    "perfgate/suites/test_throughput.py",
    "perfgate/engines/launch.py",
    "scripts/bootstrap",
    "pyproject.toml",
    "requirements-dev.txt",
    ".ci/run",
    ".github/workflows/perf-gate.yml",
    ".github/CODEOWNERS",
    "runner/hooks/job-started.sh",
]


@pytest.mark.parametrize("path", GUARDED)
def test_codeowners_guard_what_the_gate_depends_on(path: str) -> None:
    assert (REPO / path).exists() or path.startswith("baselines/"), path
    assert _owners(path), f"{path} has no code owner: a pull request could change it unreviewed"
