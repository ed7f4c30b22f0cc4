"""Helpers for the runner's tests: the CLI in a fresh interpreter, with a stand-in nvidia-smi."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..conftest import REPO
from ..hang import HANG_S


@pytest.fixture
def runner_name() -> str:
    """A runner name no other process on this machine carries: the hooks end only its own."""
    return f"perfgate-test-{uuid.uuid4().hex[:12]}"


def run_cli(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = HANG_S
) -> subprocess.CompletedProcess[str]:
    """`perfgate ARGS` as the hook scripts call it, with `env` over this environment."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    full.pop("PERFGATE_DB_URL", None)
    full.pop("PERFGATE_PROFILE", None)
    full.pop("PERFGATE_MACHINE_STATE", None)
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
