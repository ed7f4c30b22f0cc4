"""benchmarks/host_cpus.py: each CPU this process may use, timed in rounds."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_every_allowed_cpu_is_timed_each_round_and_tabled(tmp_path: Path) -> None:
    host_cpus = importlib.import_module("host_cpus")
    assert host_cpus.main(["--out", str(tmp_path), "--rounds", "2", "--mib", "8"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    cpus = sorted(os.sched_getaffinity(0))
    assert [row["cpu"] for row in results["cpus"]] == cpus
    for row in results["cpus"]:
        assert len(row["samples"]) == 2
        assert all(s["python_loop_us"] > 0 and s["read_gb_s"] > 0 for s in row["samples"])
    text = (tmp_path / "results.md").read_text()
    assert f"{len(cpus)} CPUs" in text and "| Python loop us |" in text
    assert os.sched_getaffinity(0) == set(cpus)  # its own CPUs given back


def test_rounds_below_one_are_refused() -> None:
    host_cpus = importlib.import_module("host_cpus")
    with pytest.raises(SystemExit) as refused:
        host_cpus.main(["--out", "x", "--rounds", "0"])
    assert refused.value.code == 2
