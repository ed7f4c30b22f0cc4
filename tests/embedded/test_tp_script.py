"""benchmarks/gpu_tp2.sh, the two-GPU record: linted, its usage checked, and its endings stage
run end to end on the CPU (--smoke)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO
from ..hang import HANG_S

SCRIPT = REPO / "benchmarks" / "gpu_tp2.sh"


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(REPO), path] if path else [str(REPO)]),
    }


def test_an_unknown_stage_exits_64_naming_the_stages(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), str(tmp_path), "compare", "sweeps"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
    )
    assert done.returncode == 64
    assert "unknown stage 'sweeps'; stages are compare, sweep, profile, endings" in done.stderr


@pytest.mark.slow
def test_the_endings_stage_on_the_cpu_leaves_no_process_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # An engine process of something else on the machine (another job, a test beside this
    # one): the stage must neither count it as left by an ending nor kill it.
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "perfgate.engines.embedded.server"]
    )
    try:
        done = subprocess.run(
            [str(SCRIPT), "--smoke", str(out), "endings"],
            capture_output=True,
            text=True,
            check=False,
            env={**_env(), "ENDINGS": "1", "TMPDIR": str(tmp_path)},
            timeout=HANG_S,
        )
        assert other.poll() is None, "the endings stage killed an engine process not its own"
    finally:
        other.kill()
        other.wait()
    summary = (out / "summary.md").read_text()
    (noted,) = [x for x in summary.splitlines() if "before the endings (left alone): " in x]
    assert str(other.pid) in noted.split(": ", 1)[1].split(), noted  # with any beside this test
    assert done.returncode == 0, summary + (out / "run.log").read_text()
    endings = (out / "endings.md").read_text()
    (row,) = [line for line in endings.splitlines() if line.startswith("| 1 |")]
    assert row.endswith("| yes |") and "| none |" in row, endings
    assert "| INT | plain | 2 |" in row  # SIGINT reached perfgate: pytest's "interrupted"
    assert "| a whole TP2 run after the endings | 0 | 0 |" in summary
    assert str(tmp_path) not in summary  # the work folder is written as WORK
