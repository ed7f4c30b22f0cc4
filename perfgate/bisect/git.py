"""A bisect's commits: the ends resolved, the range listed, each commit checked out apart.

The range is the first-parent line from the good end to the bad end (``git rev-list
--first-parent good..bad``, oldest first): the commits as they landed on the branch, merges
included as one commit each. Each commit measured is checked out with ``git worktree add
--detach`` into a temporary folder of its own and removed once measured; the user's working
tree, index and branches are never touched (git keeps a worktree's bookkeeping under
``.git/worktrees/``, which the removal clears).

How a commit's code reaches its servers (the rule of :func:`write_interpreter`): the servers
run this environment's Python with the commit's source folders first on ``PYTHONPATH``,
after the probe's start-up folder only. Nothing is installed per commit: a commit is
measured with the dependencies, compiled extensions and entry points this environment has.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from perfgate.errors import ConfigError, InfrastructureError

GIT_TIMEOUT_S = 120.0
MAX_RANGE = 100_000  # commits: far more than any bisect needs, less than git could list
OWNER_FILE = "owner.json"  # in a bisect's temporary folder: the process that made it
PREFIX = "perfgate-bisect-"
# Files whose change between the ends means the commits need dependencies of their own.
DEPENDENCY_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "requirements*.txt")


@dataclass(frozen=True)
class Commit:
    """One commit of the range."""

    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]

    def describe(self) -> str:
        return f"{self.short} {self.subject!r}"


def git(repo: Path, *args: str, field: str | None = None) -> str:
    """Run ``git -C repo ARGS``; its output. A failure is bad input where `field` names the
    flag the user gave (a revision, say), an infrastructure failure otherwise."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise InfrastructureError(f"cannot run git: {error}") from None
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip()).splitlines()
        why = message[-1] if message else f"exit {done.returncode}"
        if field is not None:
            raise ConfigError(f"git {shlex.join(args)}: {why}", field=field)
        raise InfrastructureError(f"git {shlex.join(args)} failed in {repo}: {why}")
    return done.stdout


def repository_root(folder: Path, flag: str = "--repo") -> Path:
    """The top folder of the git repository holding `folder`."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", field=flag, fix="name a git checkout")
    try:
        top = git(folder, "rev-parse", "--show-toplevel", field=flag).strip()
    except ConfigError:
        raise ConfigError(
            f"{folder} is not inside a git repository",
            field=flag,
            fix="run from the checkout of the code to bisect, or name it with --repo",
        ) from None
    return Path(top)


def resolve_commit(repo: Path, revision: str, flag: str) -> str:
    """The full id of the commit `revision` names (a branch, tag, id, HEAD~3...)."""
    if not revision or revision.startswith("-"):
        raise ConfigError(f"{revision!r} is not a revision", field=flag, fix="name a commit")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").strip()
    except InfrastructureError:
        raise ConfigError(
            f"no commit {revision!r} in {repo}",
            field=flag,
            fix="name a commit of this repository (fetch it first if it is a remote's)",
        ) from None


def commit_range(repo: Path, good: str, bad: str) -> list[Commit]:
    """The good end, then each commit after it up to the bad end, oldest first.

    Refuses ends that are one commit, a bad end that does not descend from the good one, and
    a range longer than :data:`MAX_RANGE`.
    """
    if good == bad:
        raise ConfigError("the good and the bad end are one commit", field="--bad")
    try:
        git(repo, "merge-base", "--is-ancestor", good, bad)
    except InfrastructureError:
        raise ConfigError(
            f"{bad[:10]} does not descend from {good[:10]}",
            field="--good",
            fix="give as --good a commit the bad end was built on (an older one of its branch)",
        ) from None
    listed = git(
        repo, "rev-list", "--first-parent", "--reverse", "--format=%H %s", f"{good}..{bad}"
    )
    commits = [Commit(good, _subject(repo, good))]
    for line in listed.splitlines():
        if line.startswith("commit "):
            continue
        sha, _, subject = line.partition(" ")
        commits.append(Commit(sha, subject))
        if len(commits) > MAX_RANGE + 1:
            raise ConfigError(
                f"the range holds more than {MAX_RANGE} commits",
                field="--good",
                fix="bisect a shorter range: a good end closer to the bad one",
            )
    if commits[-1].sha != bad:  # a bad end off its own first-parent line cannot happen
        raise InfrastructureError(f"git listed the range {good[:10]}..{bad[:10]} without its end")
    return commits


def _subject(repo: Path, sha: str) -> str:
    return git(repo, "log", "-1", "--format=%s", sha).strip()


def changed_dependency_files(repo: Path, good: str, bad: str) -> list[str]:
    """The dependency files (pyproject.toml, requirements*.txt...) that differ between the
    ends: the commits between may need dependencies this environment does not have."""
    listed = git(repo, "diff", "--name-only", good, bad, "--", *DEPENDENCY_FILES)
    return [line for line in listed.splitlines() if line]


def write_interpreter(
    path: Path, python: str, sources: Sequence[Path], first: Sequence[Path] = ()
) -> Path:
    """Write an executable at `path` that runs `python` with `sources` on the path.

    The rule: ``PYTHONPATH`` becomes `first` (the probe's start-up folder, so that a
    ``sitecustomize`` of the commit's cannot shadow the probe's), then `sources`, then what
    it was. So the commit's packages are imported before the installed ones (an editable
    install's finder or site-packages), and everything else comes from this environment.
    """
    entries = ":".join(str(p) for p in (*first, *sources))
    path.write_text(
        "#!/bin/sh\n"
        "# perfgate bisect: this environment's Python, one commit's source first on the path\n"
        f"PYTHONPATH={shlex.quote(entries)}" + '"${PYTHONPATH:+:$PYTHONPATH}"\n'
        "export PYTHONPATH\n"
        f'exec {shlex.quote(python)} "$@"\n'
    )
    path.chmod(0o755)
    return path


class Worktrees:
    """Temporary checkouts of one repository's commits, all removed when the block ends.

    ``with Worktrees(repo) as trees: folder = trees.checkout(sha)``. Each checkout is a
    detached worktree in a temporary folder; `remove` ends one early, and the end of the
    block ends the rest however it is left (an error, Ctrl-C, SIGTERM raised as SystemExit).
    A process killed outright leaves its folder behind: the next bisect of the repository
    removes the worktrees whose owning process is gone (:func:`remove_leftovers`).
    """

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.folder: Path | None = None
        self._trees: dict[str, Path] = {}

    def __enter__(self) -> Worktrees:
        remove_leftovers(self.repo)
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        owner = {"pid": os.getpid(), "repo": str(self.repo)}
        (self.folder / OWNER_FILE).write_text(json.dumps(owner) + "\n")
        return self

    def checkout(self, sha: str) -> Path:
        """The folder holding commit `sha`'s files (checked out now unless it is)."""
        assert self.folder is not None, "use Worktrees in a with block"
        if sha not in self._trees:
            tree = self.folder / sha[:12]
            # Known before git starts: an add stopped half-way (Ctrl-C) leaves a worktree
            # that git keeps locked, which the end of the block must still remove.
            self._trees[sha] = tree
            git(self.repo, "worktree", "add", "--detach", "--quiet", str(tree), sha)
        return self._trees[sha]

    def remove(self, sha: str) -> None:
        """Remove commit `sha`'s checkout, if there is one."""
        tree = self._trees.pop(sha, None)
        if tree is not None:
            _remove_tree(self.repo, tree)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for sha in list(self._trees):
            self.remove(sha)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        _prune(self.repo)


def _remove_tree(repo: Path, tree: Path) -> None:
    # Should git refuse, the folder is removed below and its bookkeeping pruned. A worktree
    # whose `git worktree add` was stopped half-way is locked ("initializing"): unlocked
    # first, or neither remove nor prune would touch it.
    with contextlib.suppress(InfrastructureError):
        git(repo, "worktree", "unlock", str(tree))
    with contextlib.suppress(InfrastructureError):
        git(repo, "worktree", "remove", "--force", str(tree))
    shutil.rmtree(tree, ignore_errors=True)


def _prune(repo: Path) -> None:
    # Bookkeeping of removed folders only: git prunes it itself later if this fails.
    with contextlib.suppress(InfrastructureError):
        git(repo, "worktree", "prune")


def remove_leftovers(repo: Path) -> list[Path]:
    """Remove the worktrees of `repo` that a bisect killed outright left; return them.

    A bisect's worktree lives in a folder named ``perfgate-bisect-*`` that names its
    process in ``owner.json``; one whose process is gone is removed with its folder.
    """
    listed = git(repo, "worktree", "list", "--porcelain")
    removed = []
    for line in listed.splitlines():
        if not line.startswith("worktree "):
            continue
        tree = Path(line.removeprefix("worktree "))
        parent = tree.parent
        if not parent.name.startswith(PREFIX) or _owner_alive(parent / OWNER_FILE):
            continue
        _remove_tree(repo, tree)
        shutil.rmtree(parent, ignore_errors=True)
        removed.append(tree)
    if removed:
        _prune(repo)
    return removed


def _owner_alive(owner: Path) -> bool:
    try:
        pid = int(json.loads(owner.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no owner file: not a folder a living bisect holds
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive, not ours to judge
    return True
