"""benchmarks/host_phase_pairs.py: whether a slow launch is its machine's or its process's,
read from a history's phases."""

from __future__ import annotations

import importlib
import json
import sqlite3
import sys
from pathlib import Path

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def _history(path: Path, runs: list[tuple[float, float, float, str | None]]) -> Path:
    """A history whose runs have these spec accept, spec prefill and plain prefill ms, and
    this injected slowdown (or none)."""
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id, scenario, fingerprint)")
        connection.execute("CREATE TABLE phases (run_id, mode, phase, repeat, mean_ms)")
        for run, (accept, prefill, plain, injected) in enumerate(runs, 1):
            fingerprint = {"injected_slowdown": injected} if injected else {}
            connection.execute(
                "INSERT INTO runs VALUES (?, 's', ?)", (run, json.dumps(fingerprint))
            )
            for repeat in (0, 1):
                connection.executemany(
                    "INSERT INTO phases VALUES (?, ?, ?, ?, ?)",
                    [(run, "spec", "accept", repeat, accept),
                     (run, "spec", "prefill", repeat, prefill),
                     (run, "plain", "prefill", repeat, plain)],
                )  # fmt: skip
    return path


def test_a_process_state_moves_its_own_phases_and_not_its_twin_s(tmp_path: Path) -> None:
    pairs = importlib.import_module("host_phase_pairs")
    # Launches 2 and 4 drew a slow spec process; the plain twins scatter on their own. Run 5
    # had a slowdown injected: it is no launch of unchanged code, and is left out.
    db = _history(
        tmp_path / "h.db",
        [(0.20, 14.0, 13.0, None), (0.45, 28.0, 12.0, None), (0.21, 15.0, 14.5, None),
         (0.44, 27.0, 14.0, None), (0.90, 60.0, 40.0, "cycle=0.1")],
    )  # fmt: skip
    text = pairs.table([db])
    assert f"| {db}, s | 4 | 0.2-0.45 | 14-28 | 12-14.5 | +1.00 |" in text
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {db}")]
    across = [float(cell) for cell in row.strip("|").split("|")[-2:]]
    assert all(abs(r) < 0.5 for r in across), row
