"""benchmarks/gpu_engine.py, the GPU experiment, runs end to end on tiny models on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import perfgate

from ..hang import HANG_S
from .common import server_env

SCRIPT = Path(perfgate.__file__).resolve().parents[1] / "benchmarks" / "gpu_engine.py"

pytestmark = pytest.mark.slow


def test_the_smoke_run_measures_plain_spec_and_the_sweep(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--smoke"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=server_env())
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["plan"]["device"] == "cpu" and results["plan"]["accept_rate"] == 0.7
    assert results["plain"]["samples"]["output_tok_s"] > 0
    assert sorted(results["sweep"]) == ["1", "2"]
    for row in results["sweep"].values():
        assert row["samples"]["accept_length"] >= 1.0
        assert row["samples"]["verify_ms"] > 0
        shares = row["phase_shares"]
        assert set(shares) == {"draft", "verify", "accept", "draft_extend", "other"}
        assert sum(shares.values()) == pytest.approx(1.0)
        assert shares["verify"] > 0.05
    # The record quotes the servers' commands without this machine's paths.
    text = (tmp_path / "results.json").read_text()
    assert str(tmp_path) not in text and str(SCRIPT.parents[1]) not in text
    assert "PYTHONPATH=./perfgate/probe/boot" in results["plain"]["command"]
    assert "PERFGATE_PROBE_DIR=WORK/" in results["plain"]["command"]
    table = (tmp_path / "results.md").read_text()
    assert "| steps | tok/s | speedup |" in table and "| 2 |" in table
