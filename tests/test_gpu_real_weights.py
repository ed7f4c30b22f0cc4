"""benchmarks/gpu_real_weights.sh, the GPU record of the trained configuration: linted, its
usage checked, and every stage run end to end on the CPU (--smoke)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO
from .hang import HANG_S

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
    # TMPDIR stays the suite's: the bandwidth stage compiles the tiny target's decode step at
    # batch 8 and position 200, and torch keeps Inductor's cache (unless TORCHINDUCTOR_CACHE_DIR
    # moves it) and its precompiled headers (always) under the temporary folder, where a later
    # run of the suite reads what an earlier one built. With TMPDIR set to tmp_path, every smoke
    # built the headers again: about 6 of its CPU seconds, in g++. Nothing else of the script's
    # goes there: its state is in STATE, its records in OUTDIR.
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "STATE": str(tmp_path / "state"),
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
def test_the_smoke_run_trains_measures_and_gates_on_the_cpu_over_two_calls(tmp_path: Path) -> None:
    # As on a device whose calls last ten minutes: the launches of one series span two calls.
    # A launch each: every launch is a server pair, and one on each side of the calls'
    # boundary is what a series spanning them needs.
    first, second = tmp_path / "first", tmp_path / "second"
    calls = ((first, ["train", "bandwidth", "sweep", "launch"], "1"), (second, ["gate"], "1"))
    for out, stages, runs in calls:
        done = subprocess.run(
            ["bash", str(SCRIPT), "--smoke", str(out), *stages],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env={**_env(tmp_path), "NOISE_RUNS": runs},
            check=False,
        )
        assert done.returncode == 0, (out / "summary.md").read_text() + done.stdout[-3000:]

    files = sorted(p.name for p in [*first.iterdir(), *second.iterdir()])
    assert files == sorted([*FILES, "run.log", "summary.md"])
    assert _steps(first) == [
        "train",
        "bandwidth",
        "sweep",
        "doctor",
        "launch 1 of 1",
    ]
    assert _steps(second) == [
        "doctor",
        "launch 1 of 1",
        "noise table",
        "approve 2 runs",
        "judged against them",
    ]
    noise = (second / "noise.md").read_text()
    assert "2 launches of embedded-cpu-smoke" in noise
    # Then each launch's medians, a row a run: the two launches (two calls) of the series.
    per_launch = noise.split("Each launch's medians:")[1].splitlines()
    rows = [line for line in per_launch if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2 and "output_tok_s (spec)" in noise, noise
    bandwidth = (first / "bandwidth.md").read_text()
    assert "decode, fused + compiled" in bandwidth and "verify x1, fused + compiled" in bandwidth
    # The compile rule is applied to what the bandwidth stage measured, and the smoke's servers
    # then run eager: its scenario less --enable-torch-compile, on both calls.
    said = (first / "summary.md").read_text()
    assert re.search(r"^compile: (on|off) by the rule; off for the smoke$", said, re.M), said
    for out in (first, second):
        launches = [
            row
            for row in (out / "summary.md").read_text().splitlines()
            if row.startswith("| launch ")
        ]
        assert launches and all("--config STATE/perfgate-eager.toml" in row for row in launches)


def _steps(out: Path) -> list[str]:
    summary = (out / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "---" not in line]
    return [line.split(" | ")[0].removeprefix("| ") for line in rows[1:]]
