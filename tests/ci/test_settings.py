"""`perfgate ci settings`: the repository settings the guarantees depend on, through `gh api`
(a stand-in `gh` serving the REST API's answers, shaped as GitHub documents them)."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ..in_process import perfgate_main
from . import fake_gh

REPO = "acme/gate"
SOUND: dict[str, dict[str, Any]] = {
    f"repos/{REPO}/environments/baseline-approval": {
        "status": 200,
        "body": {
            "name": "baseline-approval",
            "can_admins_bypass": False,
            "protection_rules": [
                {
                    "type": "required_reviewers",
                    "prevent_self_review": True,
                    "reviewers": [{"type": "Team", "reviewer": {"slug": "perf-owners"}}],
                },
                {"type": "branch_policy"},
            ],
            "deployment_branch_policy": {
                "protected_branches": True,
                "custom_branch_policies": False,
            },
        },
    },
    f"repos/{REPO}/actions/permissions/workflow": {
        "status": 200,
        "body": {"default_workflow_permissions": "read", "can_approve_pull_request_reviews": False},
    },
    f"repos/{REPO}/actions/permissions/fork-pr-contributor-approval": {
        "status": 200,
        "body": {"approval_policy": "all_external_contributors"},
    },
    f"repos/{REPO}/branches/main/protection": {
        "status": 200,
        "body": {
            "required_status_checks": {
                "strict": True,
                "contexts": ["perf gate", "scripts/test"],
                "checks": [{"context": "perf gate", "app_id": 15368}],
            },
            "required_pull_request_reviews": {
                "require_code_owner_reviews": True,
                "required_approving_review_count": 1,
            },
            "enforce_admins": {"enabled": True},
        },
    },
    f"repos/{REPO}/codeowners/errors": {"status": 200, "body": {"errors": []}},
}


def _settings(tmp_path: Path, api: dict[str, Any], *args: str):  # type: ignore[no-untyped-def]
    gh = fake_gh.install(tmp_path / "gh", [], api)
    env = {**gh, "GH_TOKEN": "test-token"}
    return perfgate_main("ci", "settings", "--repo", REPO, *args, cwd=tmp_path, env=env)


def test_a_repository_set_up_as_the_guide_says_passes(tmp_path: Path) -> None:
    result = _settings(tmp_path, SOUND, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c["status"] for c in json.loads(result.stdout)["checks"]}
    assert set(checks.values()) == {"ok"} and len(checks) == 11, checks


def test_each_setting_that_breaks_a_guarantee_is_named(tmp_path: Path) -> None:
    api = copy.deepcopy(SOUND)
    environment = api[f"repos/{REPO}/environments/baseline-approval"]["body"]
    environment["protection_rules"][0]["prevent_self_review"] = False
    environment["can_admins_bypass"] = True
    api[f"repos/{REPO}/actions/permissions/workflow"]["body"] = {
        "default_workflow_permissions": "write",
        "can_approve_pull_request_reviews": True,
    }
    api[f"repos/{REPO}/actions/permissions/fork-pr-contributor-approval"]["body"] = {
        "approval_policy": "first_time_contributors"
    }
    protection = api[f"repos/{REPO}/branches/main/protection"]["body"]
    protection["required_status_checks"] = {"contexts": ["scripts/test"], "checks": []}
    protection["required_pull_request_reviews"]["require_code_owner_reviews"] = False
    result = _settings(tmp_path, api)
    assert result.returncode == 64, result.stdout + result.stderr
    failed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("  FAIL")}
    assert failed == {"environment", "workflow", "actions", "fork", "code", "required"}, failed
    assert "turn on 'Prevent self-review'" in result.stdout
    assert "turn off 'Allow GitHub Actions to create and approve pull requests'" in result.stdout
    assert "not required: perf gate" in result.stdout
    assert result.stdout.splitlines()[-1] == "perfgate ci settings: 7 to change, exit 64"


def test_no_environment_no_protection_and_what_cannot_be_read(tmp_path: Path) -> None:
    api = copy.deepcopy(SOUND)
    api[f"repos/{REPO}/environments/baseline-approval"] = {
        "status": 404,
        "body": {"message": "Not Found"},
    }
    api[f"repos/{REPO}/branches/main/protection"] = {
        "status": 404,
        "body": {"message": "Branch not protected"},
    }
    api[f"repos/{REPO}/rules/branches/main"] = {"status": 200, "body": []}
    api[f"repos/{REPO}/codeowners/errors"] = {
        "status": 403,
        "body": {"message": "Resource not accessible by integration"},
    }
    result = _settings(tmp_path, api, "--json")
    assert result.returncode == 64, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["environment"]["detail"] == (
        "there is no baseline-approval environment: create it"
    )
    assert checks["code owners' review"]["status"] == "fail"
    assert checks["CODEOWNERS"] == {
        "name": "CODEOWNERS",
        "status": "unknown",
        "detail": "not checked: the token may not read it",
    }


def test_without_gh_it_is_an_infrastructure_failure(tmp_path: Path) -> None:
    result = perfgate_main(
        "ci", "settings", "--repo", REPO, cwd=tmp_path, env={"PATH": os.path.dirname(sys.executable)}
    )  # fmt: skip
    assert result.returncode == 69, result.stdout + result.stderr
    assert "gh (GitHub's CLI) is not on PATH" in result.stderr


@pytest.mark.parametrize("repo", ["", "acme"])
def test_the_repository_must_be_named(tmp_path: Path, repo: str) -> None:
    result = perfgate_main(
        "ci", "settings", "--repo", repo, cwd=tmp_path, env={"GITHUB_REPOSITORY": ""}
    )
    assert result.returncode == 64 and "--repo:" in result.stderr, result.stderr
