"""benchmarks/accept_context.py: the plan's acceptance model checked cycle by cycle."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_the_chance_after_a_full_and_after_a_failed_cycle_is_counted_per_row() -> None:
    context = importlib.import_module("accept_context")
    # k = 2: row 0 goes full, full, failed, full; row 1 failed, full.
    depths = {0: [2, 2, 1, 2], 1: [0, 2]}
    full, failed, n_full, n_failed = context.after(depths, 2, 2)
    assert (n_full, n_failed) == (2, 2)  # after 2 (twice in row 0); after 1 and after 0
    assert (full, failed) == (pytest.approx(0.5), pytest.approx(1.0))
    first_full, first_failed, _, _ = context.after(depths, 2, 1)
    assert (first_full, first_failed) == (pytest.approx(1.0), pytest.approx(1.0))


def test_the_tiny_models_at_the_profiled_steps_give_the_model_back(tmp_path: Path) -> None:
    """At the long chain's own steps the model is the run itself (error +0.0%); below it, the
    table has a row per chain length asked for."""
    context = importlib.import_module("accept_context")
    out = tmp_path / "context.md"
    assert context.main(["--steps", "1,3", "--profiled", "4", "--out", str(out)]) == 0
    rows = [
        line for line in out.read_text().splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ["1", "3", "4"]
    assert rows[-1].split("|")[5].strip() == "+0.0%"


def test_steps_at_or_past_the_profiled_chain_are_refused() -> None:
    context = importlib.import_module("accept_context")
    with pytest.raises(SystemExit) as exited:
        context.main(["--steps", "6", "--profiled", "6"])
    assert exited.value.code == 2
