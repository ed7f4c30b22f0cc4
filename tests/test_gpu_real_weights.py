"""benchmarks/gpu_real_weights.sh, the GPU record of the trained configuration: linted, its
usage checked, and every stage run end to end on the CPU (--smoke)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_real_weights.sh"
FILES = [
    "bandwidth.json",
    "bandwidth.md",
    "history.db",
    "noise.md",
    "report.html",
    "run.log",
    "summary.md",
    "sweep.json",
    "sweep.md",
    "training.json",
]


def _env(tmp_path: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "STATE": str(tmp_path / "state"),
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(REPO), path] if path else [str(REPO)]),
    }
    env.pop("PERFGATE_DB_URL", None)
    return env


def test_an_unknown_stage_exits_64_naming_the_stages(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out"), "train", "gates"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(tmp_path),
    )
    assert done.returncode == 64
    assert (
        "unknown stage 'gates'; stages are train, bandwidth, sweep, gate, launch, judge"
        in done.stderr
    )


@pytest.mark.slow
def test_the_smoke_run_trains_measures_and_gates_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(SCRIPT), "--smoke", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=_env(tmp_path),
        check=False,
    )
    summary = (out / "summary.md").read_text()
    assert done.returncode == 0, summary + done.stdout[-3000:]
    assert sorted(p.name for p in out.iterdir()) == FILES
    steps = [line for line in summary.splitlines() if line.startswith("| ") and "---" not in line]
    names = [line.split(" | ")[0].removeprefix("| ") for line in steps[1:]]
    assert names == [
        "train",
        "bandwidth",
        "sweep",
        "doctor",
        "launch 1 of 3",
        "launch 2 of 3",
        "launch 3 of 3",
        "noise table",
        "approve 3 runs",
        "judged against them",
    ]
    assert "3 launches of embedded-cpu-smoke" in (out / "noise.md").read_text()
    assert "decode, fused + compiled" in (out / "bandwidth.md").read_text()
