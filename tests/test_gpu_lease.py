"""benchmarks/gpu_lease.sh, one device call of the trained GPU records: what it refuses before
running anything (its parts are tested on the CPU in their own files)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_lease.sh"


def _lease(
    tmp_path: Path, *args: str, cards: str | None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The script with an nvidia-smi that lists CARDS (None: one that fails, as without a GPU)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 9\n" if cards is None else f"#!/bin/sh\nprintf '{cards}\\n'\n")
    smi.chmod(0o755)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={
            "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
            "STATE": str(tmp_path / "state"),
            **env,
        },
    )


@pytest.mark.parametrize("args", [(), ("a", "b"), ("--smoke", "out")], ids=["none", "two", "smoke"])
def test_anything_but_one_outdir_is_refused_with_the_usage(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = _lease(tmp_path, *args, cards="GPU 0: NVIDIA H200 (UUID: GPU-1)")
    assert done.returncode == 64, done.stderr
    assert f"usage: {SCRIPT} OUTDIR" in done.stderr
    assert not (tmp_path / "state").exists()


def test_without_a_gpu_nothing_runs_and_nothing_is_written(tmp_path: Path) -> None:
    done = _lease(tmp_path, str(tmp_path / "out"), cards=None)
    assert done.returncode == 69
    assert "no GPU here (nvidia-smi -L lists none): run it on a device" in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()


def test_another_card_than_an_h200_is_named_and_runs_nothing_unless_allowed(tmp_path: Path) -> None:
    h100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b30f08b)"
    done = _lease(tmp_path, str(tmp_path / "out"), cards=h100)
    assert done.returncode == 69
    assert f"this card is not an H200 ({h100}); nothing run. NEED_H200=0 runs on any card" in (
        done.stderr
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()
    # Allowed, it runs its first part, the training, and ends with that part's exit: here
    # the gate proof's refusal to go on without perfgate's wheels (69), before any training
    # (an interpreter that imports nothing, whatever this machine's python3 has installed).
    wheels = tmp_path / "no-wheels"
    wheels.mkdir()
    allowed = _lease(
        tmp_path,
        str(tmp_path / "out"),
        cards=h100,
        NEED_H200="0",
        PLAN="0",
        GATE="0",
        WHEELS=str(wheels),
        PYTHON="/usr/bin/false",
    )
    assert allowed.returncode == 69, allowed.stdout + allowed.stderr
    assert "== gate train exit 69" in allowed.stdout
    # (the part's lines reach stdout through its own tee: in no fixed order with the script's)
    assert re.search(r"^== call done at \d+s, exit 69$", allowed.stdout, re.M), allowed.stdout
    assert h100 in (tmp_path / "out" / "gpu.txt").read_text()
