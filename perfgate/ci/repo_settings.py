"""The repository settings the gate's guarantees depend on, read through `gh api`.

docs/runner-setup.md ("Repository settings") says why each is needed. Every check reads one
endpoint of GitHub's REST API; what the token may not read (403), or what GitHub does not show
for this repository (404 where a missing thing is not itself the problem), is reported as not
checked rather than guessed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from perfgate.ci.approvals import ENVIRONMENT
from perfgate.errors import InfrastructureError

REQUIRED_CHECKS = ("perf gate", "scripts/test")  # the jobs' names in perf-gate.yml and ci.yml
Status = Literal["ok", "fail", "unknown"]
# `gh api PATH` -> (HTTP status, parsed body)
Api = Callable[[str], tuple[int, Any]]


@dataclass(frozen=True)
class SettingCheck:
    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def gh_api(path: str, timeout_s: float = 60.0) -> tuple[int, Any]:
    """GET `path` through the GitHub CLI: its HTTP status and JSON body."""
    gh = shutil.which("gh")
    if gh is None:
        raise InfrastructureError(
            "gh (GitHub's CLI) is not on PATH: install it and `gh auth login`"
        )
    try:
        done = subprocess.run(
            [gh, "api", path], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InfrastructureError(f"gh api {path} failed: {error}") from None
    try:
        body = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        body = None
    if done.returncode == 0:
        return 200, body
    status = re.search(r"\(HTTP (\d{3})\)", done.stderr)
    if status is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InfrastructureError(f"gh api {path} failed: {tail}")
    return int(status.group(1)), body


def check_settings(repo: str, branch: str = "main", api: Api = gh_api) -> list[SettingCheck]:
    """Every setting of docs/runner-setup.md that the API shows, for `repo` (OWNER/NAME)."""
    return [
        *_environment(repo, api),
        *_workflow_permissions(repo, api),
        _fork_approval(repo, api),
        *_branch(repo, branch, api),
        _codeowners(repo, api),
    ]


def _unknown(name: str, status: int) -> SettingCheck:
    why = "the token may not read it" if status in (401, 403) else f"HTTP {status}"
    return SettingCheck(name, "unknown", f"not checked: {why}")


def _check(name: str, ok: bool, good: str, bad: str) -> SettingCheck:
    return SettingCheck(name, "ok" if ok else "fail", good if ok else bad)


def _environment(repo: str, api: Api) -> Iterator[SettingCheck]:
    where = f"Settings → Environments → {ENVIRONMENT}"
    status, body = api(f"repos/{repo}/environments/{ENVIRONMENT}")
    if status == 404:
        yield SettingCheck(
            "environment", "fail", f"there is no {ENVIRONMENT} environment: create it"
        )
        return
    if status != 200:
        yield _unknown("environment", status)
        return
    rules = [r for r in body.get("protection_rules") or [] if r.get("type") == "required_reviewers"]
    reviewers = [r for rule in rules for r in rule.get("reviewers") or []]
    yield _check(
        "environment reviewers",
        bool(reviewers),
        f"{len(reviewers)} required reviewer(s)",
        f"no required reviewers: add them ({where})",
    )
    yield _check(
        "environment self-review",
        any(rule.get("prevent_self_review") is True for rule in rules),
        "prevent self-review is on",
        f"a reviewer may approve an update they started: turn on 'Prevent self-review' ({where})",
    )
    yield _check(
        "environment admins",
        body.get("can_admins_bypass") is False,
        "administrators cannot bypass it",
        "administrators may bypass the review: turn off 'Allow administrators to bypass' "
        f"({where})",
    )
    policy = body.get("deployment_branch_policy")
    yield _check(
        "environment branches",
        isinstance(policy, dict) and bool(policy),
        "deployment branches are limited",
        f"any branch may deploy: limit deployment branches to main ({where})",
    )


def _workflow_permissions(repo: str, api: Api) -> Iterator[SettingCheck]:
    where = "Settings → Actions → General → Workflow permissions"
    status, body = api(f"repos/{repo}/actions/permissions/workflow")
    if status != 200:
        yield _unknown("workflow token", status)
        return
    yield _check(
        "workflow token",
        body.get("default_workflow_permissions") == "read",
        "read-only by default",
        f"jobs get write scopes they do not name: choose 'Read repository contents' ({where})",
    )
    yield _check(
        "actions approve pull requests",
        body.get("can_approve_pull_request_reviews") is False,
        "the workflow token cannot approve pull requests",
        "a same-repository pull request could approve itself: turn off 'Allow GitHub Actions "
        f"to create and approve pull requests' ({where})",
    )


def _fork_approval(repo: str, api: Api) -> SettingCheck:
    status, body = api(f"repos/{repo}/actions/permissions/fork-pr-contributor-approval")
    if status != 200:
        return _unknown("fork pull requests", status)
    policy = body.get("approval_policy")
    return _check(
        "fork pull requests",
        policy == "all_external_contributors",
        "every external contributor's run needs approval",
        f"is {policy!r}: require approval for all external contributors "
        "(Settings → Actions → General)",
    )


def _branch(repo: str, branch: str, api: Api) -> Iterator[SettingCheck]:
    where = f"Settings → Branches → {branch}"
    admins: bool | None
    status, body = api(f"repos/{repo}/branches/{branch}/protection")
    if status == 200:
        reviews = body.get("required_pull_request_reviews") or {}
        count = int(reviews.get("required_approving_review_count") or 0)
        owners = reviews.get("require_code_owner_reviews") is True
        checks = body.get("required_status_checks") or {}
        contexts = set(checks.get("contexts") or []) | {
            c.get("context") for c in checks.get("checks") or []
        }
        admins = (body.get("enforce_admins") or {}).get("enabled") is True
    elif status == 404:
        count, owners, contexts, admins = _rulesets(repo, branch, api)
    else:
        yield _unknown("branch protection", status)
        return
    yield _check(
        "code owners' review",
        count >= 1 and owners,
        f"{count} approval(s), code owners' review required",
        f"require a pull request with an approval and 'Require review from Code Owners' ({where})",
    )
    missing = [name for name in REQUIRED_CHECKS if name not in contexts]
    yield _check(
        "required checks",
        not missing,
        f"{', '.join(REQUIRED_CHECKS)} required",
        f"not required: {', '.join(missing)}; add them as required status checks ({where})",
    )
    if admins is None:
        yield SettingCheck("admins", "unknown", "not checked: a ruleset's bypass list is not shown")
    else:
        yield _check(
            "admins",
            admins,
            "the rules hold for administrators",
            f"administrators may bypass the rules: include them ({where})",
        )


def _rulesets(repo: str, branch: str, api: Api) -> tuple[int, bool, set[str], bool | None]:
    """What the rulesets that apply to `branch` require (read access is enough)."""
    status, rules = api(f"repos/{repo}/rules/branches/{branch}")
    rules = rules if status == 200 and isinstance(rules, list) else []
    count, owners, contexts = 0, False, set()
    for rule in rules:
        parameters = rule.get("parameters") or {}
        if rule.get("type") == "pull_request":
            count = max(count, int(parameters.get("required_approving_review_count") or 0))
            owners = owners or parameters.get("require_code_owner_review") is True
        if rule.get("type") == "required_status_checks":
            contexts |= {c.get("context") for c in parameters.get("required_status_checks") or []}
    return count, owners, contexts, None if rules else False


def _codeowners(repo: str, api: Api) -> SettingCheck:
    status, body = api(f"repos/{repo}/codeowners/errors")
    if status != 200:
        return _unknown("CODEOWNERS", status)
    errors = body.get("errors") or []
    first = " ".join(str(errors[0].get("message", "")).split())[:200] if errors else ""
    return _check(
        "CODEOWNERS",
        not errors,
        "no errors",
        f"{len(errors)} error(s) GitHub reports in .github/CODEOWNERS, the first: {first}",
    )
