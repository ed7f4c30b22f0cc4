"""benchmarks/gpu_phase_windows.sh, where the GPU scenario's cycle waits on the host: run end
to end on the CPU with the default scenario seeded in its place (BASE)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_phase_windows.sh"


@pytest.mark.slow
def test_each_launch_is_profiled_and_its_phase_windows_tabled(tmp_path: Path) -> None:
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHON": sys.executable, "BASE": "embedded-default", "LAUNCHES": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), path] if path else [str(REPO)])}  # fmt: skip
    done = subprocess.run(
        [str(SCRIPT), str(tmp_path)], capture_output=True, text=True, env=env, timeout=280
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (tmp_path / "phase-windows.md").read_text()
    assert "# Phase windows of the GPU scenario (seeded weights), 1 launch" in table
    for launch in (1,):
        profile = json.loads((tmp_path / f"launch-{launch}" / "profile.json").read_text())
        assert profile["scenario"] == "embedded-default-seeded"
        assert set(profile["busy"]) == {"draft", "verify", "accept", "draft_extend"}
        assert all(seen["window_ms"] > 0 for seen in profile["busy"].values())
    row = next(line for line in table.splitlines() if line.startswith("| draft_extend |"))
    assert row.count("%") == 1  # a window / work / busy cell for the launch
    assert not (tmp_path / "state" / "site").exists()
