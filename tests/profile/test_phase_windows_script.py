"""benchmarks/gpu_phase_windows.sh, where the GPU scenario's cycle waits on the host: run end
to end on the CPU with the default scenario seeded in its place (BASE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .seeded import run_seeded


@pytest.mark.slow
def test_each_launch_is_profiled_and_its_phase_windows_tabled(tmp_path: Path) -> None:
    run_seeded("gpu_phase_windows.sh", tmp_path)
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
