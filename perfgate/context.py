"""Where a run comes from: the commit and branch, and the CI job and pull request if any."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.results import RunContext


@dataclass(frozen=True)
class GitHubRun:
    """What GitHub Actions says of the job perfgate runs in, read from its variables here and
    nowhere else; every field empty outside Actions."""

    sha: str = ""  # GITHUB_SHA
    head_ref: str = ""  # GITHUB_HEAD_REF: a pull request's branch
    ref_name: str = ""  # GITHUB_REF_NAME
    ref: str = ""  # GITHUB_REF: refs/pull/N/merge on a pull request
    run_id: str = ""  # GITHUB_RUN_ID
    repository: str = ""  # GITHUB_REPOSITORY: OWNER/REPO
    server_url: str = "https://github.com"  # GITHUB_SERVER_URL

    @property
    def repository_url(self) -> str | None:
        return f"{self.server_url}/{self.repository}" if self.repository else None

    @property
    def run_url(self) -> str | None:
        """The job's page, where GitHub names both the repository and the run."""
        if not (self.run_id and self.repository):
            return None
        return f"{self.repository_url}/actions/runs/{self.run_id}"

    @property
    def pull_request(self) -> str | None:
        pull = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", self.ref)
        return pull.group(1) if pull else None


def github_run(environ: Mapping[str, str] | None = None) -> GitHubRun:
    """GitHub Actions' variables from `environ` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    return GitHubRun(
        sha=env.get("GITHUB_SHA", ""),
        head_ref=env.get("GITHUB_HEAD_REF", ""),
        ref_name=env.get("GITHUB_REF_NAME", ""),
        ref=env.get("GITHUB_REF", ""),
        run_id=env.get("GITHUB_RUN_ID", ""),
        repository=env.get("GITHUB_REPOSITORY", ""),
        server_url=env.get("GITHUB_SERVER_URL") or GitHubRun.server_url,
    )


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def detect_context(
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    clean_paths: Sequence[Path] = (),
) -> RunContext:
    """Read the run's origin from GitHub Actions' variables, falling back to git.

    Changes under ``clean_paths`` (the baselines folder: `perfgate baseline update` writes it,
    and it shapes no measurement) do not make the tree dirty.
    """
    github = github_run(environ)
    where = cwd or Path.cwd()
    commit = github.sha or _git(["rev-parse", "HEAD"], where)
    branch = (
        github.head_ref or github.ref_name or _git(["rev-parse", "--abbrev-ref", "HEAD"], where)
    )
    excluded = [f":(exclude){path.resolve()}" for path in clean_paths]
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", ":/", *excluded], where)
    return RunContext(
        commit=commit or None,
        branch=branch or None,
        pr=github.pull_request,
        ci_url=github.run_url,
        dirty=bool(status),
    )
