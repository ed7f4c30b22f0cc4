"""benchmarks/gpu_overlap.sh, the overlap schedule against the serial one in fresh launches:
run end to end on the CPU with the default scenario seeded in its place (BASE)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ..conftest import REPO
from .seeded import run_seeded


@pytest.mark.slow
def test_both_schedules_are_launched_alternately_and_tabled(tmp_path: Path) -> None:
    run_seeded("gpu_overlap.sh", tmp_path)
    with sqlite3.connect(tmp_path / "history.db") as history:
        runs = history.execute("SELECT scenario, config FROM runs ORDER BY id").fetchall()
        servers = [text for (text,) in history.execute("SELECT servers FROM runs")]
    # The history comes back from the device: its server commands name no path of that machine.
    assert servers and all("STATE/" in text and str(REPO) not in text for text in servers)
    assert [scenario for scenario, _ in runs] == ["overlap", "serial"]  # then serial, overlap
    for scenario, config in runs:
        flags = json.loads(config)["extra_args"]  # both servers'
        assert ("--disable-overlap-schedule" in flags) is (scenario == "serial")
    for variant in ("overlap", "serial"):
        table = (tmp_path / f"{variant}.md").read_text()
        assert table.startswith(f"1 launch of {variant}")
        assert "| cycle_ms | spec |" in table
    log = (tmp_path / "run.log").read_text()
    assert str(tmp_path) not in log  # written as OUT
