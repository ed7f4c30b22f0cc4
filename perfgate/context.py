"""Where a run comes from: the commit and branch, and the CI job and pull request if any."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfgate.results import RunContext


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
    env = os.environ if environ is None else environ
    where = cwd or Path.cwd()
    commit = env.get("GITHUB_SHA") or _git(["rev-parse", "HEAD"], where)
    branch = (
        env.get("GITHUB_HEAD_REF")
        or env.get("GITHUB_REF_NAME")
        or _git(["rev-parse", "--abbrev-ref", "HEAD"], where)
    )
    pull = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", env.get("GITHUB_REF", ""))
    ci_url = None
    if env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        ci_url = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    excluded = [f":(exclude){path.resolve()}" for path in clean_paths]
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", ":/", *excluded], where)
    return RunContext(
        commit=commit or None,
        branch=branch or None,
        pr=pull.group(1) if pull else None,
        ci_url=ci_url,
        dirty=bool(status),
    )
