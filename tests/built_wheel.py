"""perfgate's wheel, as `pip install perfgate` would fetch it, built once for the whole suite.

Built from a copy of this checkout's files (tracked, and untracked but not ignored), so that the
build leaves nothing in the checkout, with this interpreter's setuptools (`--no-build-isolation`).
The tests of an installed perfgate (tests/test_core_install.py, test_gate_run's wheel under
strict warnings) install this one file instead of building their own: each build copied the
checkout and ran pip and setuptools, 1.5-2 CPU s. Under several workers (scripts/test) the
first worker to need it builds it and the others wait for it: a lock in the temporary root that
the workers share, as tests/recorded.py does for the recorded project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO
from .hang import HANG_S
from .session_once import session_lock


def session_wheel(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    """The path of the session's perfgate wheel, built here unless a worker did it already.
    Read-only for the tests: they install it, never change it."""
    with session_lock(config, factory, "perfgate-wheel") as root:
        folder = root / "perfgate-wheel"
        if not list(folder.glob("perfgate-*.whl")):
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            _build(folder)
    (wheel,) = folder.glob("perfgate-*.whl")
    return wheel


def _build(folder: Path) -> None:
    """Build the wheel into `folder`; the wheel is moved there last, whole."""
    source, built = folder / "source", folder / "built"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    # The build sees neither the suite's variables nor its virtual environment's activation.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("PYTEST_")
    }
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(built), str(source)]
    done = subprocess.run(
        [*pip, *build], cwd=folder, env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    (wheel,) = built.glob("perfgate-*.whl")
    wheel.rename(folder / wheel.name)
    shutil.rmtree(source)
    shutil.rmtree(built)
