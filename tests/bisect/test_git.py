"""A bisect's commits and worktrees, on real git repositories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import perfgate.bisect.git as git_module
from perfgate.bisect.git import (
    OWNER_FILE,
    Worktrees,
    changed_dependency_files,
    commit_range,
    write_interpreter,
)

from .repository import git
from .test_runner import make_speed_repository


def test_the_range_is_the_first_parent_line_oldest_first(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, [1.0, 2.0, 3.0])
    git(repo, "switch", "-q", "-c", "side", ids[1])
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", "side.txt")
    git(repo, "commit", "-q", "-m", "on the side")
    git(repo, "switch", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")
    commits = commit_range(repo, ids[0], merge)
    assert [c.sha for c in commits] == [ids[0], ids[1], ids[2], merge]  # the side's commit: no
    assert [c.subject for c in commits] == ["commit 0", "commit 1", "commit 2", "merge side"]


def test_worktrees_are_removed_however_the_block_ends(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, [1.0, 2.0])
    with pytest.raises(RuntimeError), Worktrees(repo) as trees:
        tree = trees.checkout(ids[0])
        assert (tree / "speed.txt").read_text() == "1.0\n"
        folder = trees.folder
        raise RuntimeError("a server failed")
    assert folder is not None and not folder.exists() and not tree.exists()
    assert git(repo, "worktree", "list").count("\n") == 0  # only the repository itself


def test_a_checkout_stopped_half_way_is_removed_with_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during `git worktree add` leaves a worktree that git keeps locked."""
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, [1.0, 2.0])
    real_git = git_module.git

    def interrupted(where: Path, *args: str, **kwargs: object) -> str:
        out = real_git(where, *args)  # type: ignore[arg-type]
        if args[:2] == ("worktree", "add"):
            real_git(where, "worktree", "lock", "--reason", "initializing", args[-2])
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(git_module, "git", interrupted)
    with pytest.raises(KeyboardInterrupt), Worktrees(repo) as trees:
        trees.checkout(ids[0])
    monkeypatch.undo()
    assert git(repo, "worktree", "list").count("\n") == 0  # only the repository itself


def test_a_killed_bisects_worktrees_are_removed_by_the_next(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, [1.0, 2.0])
    script = (
        "import os, sys; from pathlib import Path; from perfgate.bisect.git import Worktrees\n"
        "trees = Worktrees(Path(sys.argv[1])).__enter__(); trees.checkout(sys.argv[2])\n"
        "print(trees.folder, flush=True); os._exit(9)  # killed: no cleanup runs\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(repo), ids[0]], capture_output=True, text=True
    )
    left = Path(done.stdout.strip())
    assert done.returncode == 9 and (left / OWNER_FILE).exists()
    assert json.loads((left / OWNER_FILE).read_text())["repo"] == str(repo)
    with Worktrees(repo) as trees:
        assert not left.exists()  # its owner is gone
        trees.checkout(ids[1])
        assert git(repo, "worktree", "list").count("\n") == 1  # the repository and ours


def test_the_commit_interpreter_puts_its_sources_first(tmp_path: Path) -> None:
    source = tmp_path / "commit"
    (source / "somepackage").mkdir(parents=True)
    (source / "somepackage" / "__init__.py").write_text("WHERE = 'the commit'\n")
    boot = tmp_path / "boot"
    boot.mkdir()
    python = write_interpreter(tmp_path / "python", sys.executable, [source], first=[boot])
    done = subprocess.run(
        [str(python), "-P", "-c", "import somepackage, sys; print(somepackage.WHERE); "
         "print(sys.path[:3])"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": "/elsewhere", "PATH": "/usr/bin:/bin"},
        check=True,
    )  # fmt: skip
    where, path = done.stdout.splitlines()
    assert where == "the commit"
    assert path == repr([str(boot), str(source), "/elsewhere"])  # then what it was


def test_changed_dependency_files_are_named(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, [1.0])
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    git(repo, "add", "pyproject.toml")
    git(repo, "commit", "-q", "-m", "dependencies")
    assert changed_dependency_files(repo, ids[0], git(repo, "rev-parse", "HEAD")) == [
        "pyproject.toml"
    ]
