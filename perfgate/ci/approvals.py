"""Who approved a baseline update: the reviewer of the deployment, never its requester alone.

The baseline-update workflow waits on the ``baseline-approval`` environment; once a required
reviewer approves, its first job reads the run's approvals from GitHub
(``GET /repos/{owner}/{repo}/actions/runs/{run_id}/approvals``: each entry's ``state``,
``user.login`` and ``environments``) and hands them to ``perfgate ci approve``. The baseline
then records the reviewer as ``approved_by``, not the person who started the workflow, and an
update approved only by the person who started it is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perfgate.errors import ConfigError

ENVIRONMENT = "baseline-approval"


def parse_approvals(text: str) -> list[dict[str, Any]]:
    """The approvals GitHub listed, as JSON text; a ConfigError if it is not such a list."""
    try:
        approvals = json.loads(text)
    except ValueError:
        approvals = None
    if not isinstance(approvals, list) or not all(isinstance(a, dict) for a in approvals):
        raise ConfigError(
            "is not the JSON list of GitHub's run approvals",
            field="--approvals",
            fix="pass the output of `gh api repos/OWNER/REPO/actions/runs/RUN_ID/approvals`",
        )
    return approvals


def approvers(approvals: Sequence[dict[str, Any]], environment: str = ENVIRONMENT) -> list[str]:
    """The logins that approved `environment`, in the order GitHub lists them, once each."""
    names: list[str] = []
    for approval in approvals:
        environments = [e.get("name") for e in approval.get("environments") or []]
        login = (approval.get("user") or {}).get("login")
        approved = approval.get("state") == "approved" and environment in environments
        if approved and login and login not in names:
            names.append(str(login))
    return names


def reviewer(
    approvals_text: str, requested_by: Sequence[str], environment: str = ENVIRONMENT
) -> str:
    """Who approved the update, for `approved_by`: the approvers other than its requesters
    (GitHub logins ignore case). Refuses an update no one, or only a requester, approved."""
    names = approvers(parse_approvals(approvals_text), environment)
    if not names:
        raise ConfigError(
            f"no reviewer approved the {environment} environment in this run",
            field="--approvals",
            fix=f"a required reviewer of {environment} approves the run's deployment",
        )
    requesters = {name.lower() for name in requested_by}
    others = [name for name in names if name.lower() not in requesters]
    if not others:
        raise ConfigError(
            f"approved only by {', '.join(names)}, who started the update",
            field="--approvals",
            fix=f"another reviewer of the {environment} environment must approve (turn on its "
            "'Prevent self-review' so GitHub refuses this too)",
        )
    return ", ".join(others)
