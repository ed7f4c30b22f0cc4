"""The watch's issues on GitHub: one per scenario, runner profile and metric, through `gh api`.

A plan (perfgate.ci.watch, written on the runner that holds the history) says, per watched
series, either the issue it should have open (title and body) or the comment that closes it.
Applying it (here, on a GitHub-hosted runner with a token that may write issues, and no
history) lists the open issues with the watch's label that the workflow's bot opened, each
found by the marker on its body's first line, then:

* a series with an issue to have: its open issue is updated (title and body), or one opened;
* a series to close: its open issue gets the comment, then is closed;
* an open issue of a series the plan does not watch (too few runs, another scenario) is
  left as it is.

Only the standard library: the applying job runs this from a checkout without installing.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.context import github_run
from perfgate.errors import ConfigError, InfrastructureError

LABEL = "perfgate-watch"
BOT = "github-actions[bot]"  # the workflow token's author name
MARKER = re.compile(r"^<!-- perfgate-watch (\{.*?\}) -->")
GH_TIMEOUT_S = 120.0

Gh = Callable[[Sequence[str], Mapping[str, Any] | None], str]


@dataclass(frozen=True, order=True)
class WatchKey:
    """Which series an issue is about."""

    scenario: str
    profile: str
    metric: str

    def to_json(self) -> dict[str, str]:
        return {"scenario": self.scenario, "profile": self.profile, "metric": self.metric}

    @classmethod
    def from_json(cls, value: Any) -> WatchKey:
        if not isinstance(value, Mapping) or not all(
            isinstance(value.get(f), str) for f in ("scenario", "profile", "metric")
        ):
            raise ValueError(f"not a watched series: {value!r}")
        return cls(value["scenario"], value["profile"], value["metric"])

    def __str__(self) -> str:
        return f"{self.metric} of {self.scenario} on {self.profile}"


def marker(key: WatchKey) -> str:
    """The first line of the issue's body, which finds the issue again."""
    return f"<!-- perfgate-watch {json.dumps(key.to_json(), sort_keys=True)} -->"


def key_of(body: str | None) -> WatchKey | None:
    """The series an issue body's marker names; None for any other body."""
    found = MARKER.match(body or "")
    if found is None:
        return None
    try:
        return WatchKey.from_json(json.loads(found.group(1)))
    except ValueError:
        return None


def run_gh(args: Sequence[str], body: Mapping[str, Any] | None = None) -> str:
    """`gh ARGS`, with `body` as its JSON input (`--input FILE`); its output."""
    with tempfile.TemporaryDirectory(prefix="perfgate-gh-") as folder:
        command = ["gh", *args]
        if body is not None:
            path = Path(folder) / "body.json"
            path.write_text(json.dumps(body))
            command += ["--input", str(path)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=GH_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise InfrastructureError(f"cannot run gh: {error}") from None
    if done.returncode != 0:
        why = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise InfrastructureError(f"gh {' '.join(args[:3])} failed: {why.splitlines()[-1]}")
    return done.stdout


def load_plan(path: Path) -> dict[str, Any]:
    """A plan file, checked enough to apply it."""
    try:
        plan = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(
            f"cannot be read as a watch plan ({error})",
            file=path,
            fix="write it with `perfgate ci watch --out PATH`",
        ) from None
    try:
        if plan.get("schema") != 1 or not isinstance(plan.get("label"), str):
            raise ValueError("schema 1 with a label")
        for entry in plan["watched"]:
            WatchKey.from_json(entry["key"])
            issue = entry.get("issue")
            if issue is None and not isinstance(entry.get("close_comment"), str):
                raise ValueError("an issue or a close comment per series")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"is not a watch plan: {error}",
            file=path,
            fix="write it with `perfgate ci watch --out PATH`",
        ) from None
    return dict(plan)


def open_issues(repo: str, label: str, gh: Gh) -> dict[WatchKey, int]:
    """The open issues of the watch (the bot's, with the label and a marker) by series."""
    listed = gh(
        [
            "api",
            "--paginate",
            f"repos/{repo}/issues?state=open&labels={label}&per_page=100",
            "--jq",
            ".[] | select(.pull_request | not) | {number, body, user: .user.login}",
        ],
        None,
    )
    found: dict[WatchKey, int] = {}
    for line in listed.splitlines():
        if not line.strip():
            continue
        issue = json.loads(line)
        key = key_of(issue.get("body"))
        if key is not None and issue.get("user") == BOT:
            found.setdefault(key, int(issue["number"]))  # the oldest open one, if several
    return found


def apply_plan(plan: Mapping[str, Any], repo: str, gh: Gh = run_gh) -> list[str]:
    """Open, update and close the watch's issues as the plan says; what was done, a line
    per issue."""
    label = str(plan["label"])
    existing = open_issues(repo, label, gh)
    done = []
    for entry in plan["watched"]:
        key = WatchKey.from_json(entry["key"])
        number = existing.get(key)
        issue = entry.get("issue")
        if issue is not None:
            fields = {"title": issue["title"], "body": issue["body"]}
            if number is None:
                created = gh(
                    ["api", "--method", "POST", f"repos/{repo}/issues", "--jq", ".number"],
                    {**fields, "labels": [label]},
                )
                done.append(f"opened #{created.strip()}: {issue['title']}")
            else:
                gh(["api", "--method", "PATCH", f"repos/{repo}/issues/{number}"], fields)
                done.append(f"updated #{number}: {issue['title']}")
        elif number is not None:
            comment = {"body": entry["close_comment"]}
            gh(["api", "--method", "POST", f"repos/{repo}/issues/{number}/comments"], comment)
            closed = {"state": "closed", "state_reason": "completed"}
            gh(["api", "--method", "PATCH", f"repos/{repo}/issues/{number}"], closed)
            done.append(f"closed #{number}: the step of {key} went back")
        else:
            done.append(f"nothing to do: {key} holds no standing step")
    return done


def repository_from_environment(given: str | None) -> str:
    """OWNER/REPO: --repo, else $GITHUB_REPOSITORY."""
    repo = given or github_run().repository
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ConfigError(
            f"{repo!r} is not OWNER/REPO",
            field="--repo",
            fix="name the repository (GitHub Actions sets $GITHUB_REPOSITORY)",
        )
    return repo
