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


def _labels(job: dict[str, Any]) -> list[str]:
    """A job's runner labels: `runs-on` as a label, a list, or a runner group with labels."""
    labels = job["runs-on"]
    if isinstance(labels, dict):
        labels = labels.get("labels", [])
    return labels if isinstance(labels, list) else [labels]


def _self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job["runs-on"]
    return "self-hosted" in _labels(job) or (isinstance(runs_on, dict) and "group" in runs_on)


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
        ("sweep.yml", "sweep"),
        ("sweep.yml", "collect"),
        ("nightly.yml", "trend"),
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


def test_the_sweep_and_the_nightly_watch_never_run_for_a_pull_request() -> None:
    """Started by hand or on a schedule, on main only: the first job of each is guarded, and
    every self-hosted job needs it (so is skipped with it)."""
    sweep = load_workflow("sweep.yml")
    assert set(sweep["on"]) == {"workflow_dispatch"}
    assert sweep["jobs"]["shards"]["if"] == "github.ref == 'refs/heads/main'"
    assert sweep["jobs"]["sweep"]["needs"] == "shards"
    assert sweep["jobs"]["collect"]["needs"] == "sweep"
    nightly = load_workflow("nightly.yml")
    assert set(nightly["on"]) == {"schedule", "workflow_dispatch"}
    assert nightly["jobs"]["trend"]["if"] == "github.ref == 'refs/heads/main'"
    assert nightly["jobs"]["issues"]["needs"] == "trend"


def test_the_shards_are_a_matrix_over_the_runner_group_with_one_history() -> None:
    job = load_workflow("sweep.yml")["jobs"]["sweep"]
    assert job["runs-on"]["group"] and "gpu-8x" in job["runs-on"]["labels"]
    assert job["strategy"]["fail-fast"] is False  # a dead shard leaves the others running
    assert job["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.shards.outputs.numbers) }}"
    (step,) = [s for s in job["steps"] if "--shard" in s.get("run", "")]
    assert '--shard "$SHARD/$SHARDS" --batch "github-$GITHUB_RUN_ID"' in step["run"]
    collect = load_workflow("sweep.yml")["jobs"]["collect"]
    (step,) = [s for s in collect["steps"] if "--collect" in s.get("run", "")]
    assert '--batch "github-$GITHUB_RUN_ID"' in step["run"]
    # The history is the runners' own PERFGATE_DB_URL: no secret, nothing on a command line.
    text = yaml.safe_dump(load_workflow("sweep.yml")["jobs"])  # the jobs, not the comments
    assert "PERFGATE_DB_URL" not in text and "--db" not in text and "secrets." not in text


def test_only_a_github_hosted_job_writes_the_watchs_issues() -> None:
    jobs = load_workflow("nightly.yml")["jobs"]
    assert jobs["trend"]["permissions"] == {"contents": "read"}
    assert jobs["issues"]["runs-on"] == "ubuntu-latest"
    assert jobs["issues"]["permissions"] == {"contents": "read", "issues": "write"}
    runs = [s["run"] for s in jobs["issues"]["steps"] if "run" in s]
    assert runs == ['python3 -m perfgate ci watch --apply "$PLAN" --repo "$GITHUB_REPOSITORY"']


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
            assert set(_labels(job)) - {"self-hosted", "linux", "x64"} <= custom, (file, name)


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
