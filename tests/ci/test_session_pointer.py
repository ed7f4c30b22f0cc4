"""The gate session leaves its pointer file, also when it was refused before measuring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, TINY_SCENARIO, write_config
from ..hang import HANG_S


def test_a_refused_session_leaves_its_error_and_code(tmp_path: Path) -> None:
    write_config(tmp_path, TINY_SCENARIO.replace("repeats = 3", "repeats = -1"))
    stale = tmp_path / ".perfgate" / "last-session.json"
    stale.parent.mkdir()
    stale.write_text('{"schema": 1, "exit_code": 0}')
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_DB_URL"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "perfgate" / "suites"),
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 64, done.stdout
    pointer = json.loads(stale.read_text())
    assert pointer["exit_code"] == 64 and pointer["runs"] == []
    (error,) = pointer["errors"]
    assert "scenarios.tiny.repeats" in error["message"] and error["exit_code"] == 64
