"""benchmarks/head_determinism.py: the head's draft steps run twice from the same seeds on the
CPU agree bit for bit under the math backend training uses, and the table says so."""

from __future__ import annotations

import subprocess
import sys

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "head_determinism.py"


def test_two_runs_of_the_tiny_head_agree_bit_for_bit_and_the_table_says_so() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| math |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == cells[2] and cells[3] == "0.00e+00" and cells[4] == cells[5]
    assert cells[6] == "yes"


def test_no_steps_is_refused_naming_the_flag() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "0"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 2 and "--steps 0" in done.stderr
