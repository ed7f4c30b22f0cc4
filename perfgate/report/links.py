"""Links from a run to its commit, pull request and CI job, made only from URLs that are safe."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# A GitHub Actions run: https://HOST/OWNER/REPO/actions/runs/ID (what perfgate.context writes).
_ACTIONS_RUN = re.compile(r"^(https?://[^/\s]+/[^/\s]+/[^/\s]+)/actions/runs/\d+")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
_PR = re.compile(r"^\d{1,10}$")


def safe_url(url: str | None) -> str | None:
    """The URL when it is http(s) with a host, else None: a `javascript:` URL never links."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return url.strip()


def repository_url(ci_urls: list[str | None], configured: str | None = None) -> str | None:
    """The repository's web URL: the configured one, else the one every GitHub Actions run
    URL in the history points into (None when there is none, or more than one)."""
    if configured:
        return safe_url(configured.rstrip("/"))
    found = {m.group(1) for url in ci_urls if url and (m := _ACTIONS_RUN.match(url))}
    return safe_url(found.pop()) if len(found) == 1 else None


def commit_url(repository: str | None, commit: str | None) -> str | None:
    """The commit's page in the repository, when both are known and the id looks like one."""
    if repository and commit and _COMMIT.match(commit):
        return f"{repository}/commit/{commit}"
    return None


def pull_url(repository: str | None, pr: str | None) -> str | None:
    """The pull request's page, when the repository is known and the number is a number."""
    if repository and pr and _PR.match(pr):
        return f"{repository}/pull/{pr}"
    return None
