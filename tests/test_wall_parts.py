"""benchmarks/wall_parts.py: which part of a repeat's wall time scatters between launches,
read from a history's samples, phases and outputs."""

from __future__ import annotations

import importlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

TOKENS = 400  # two prompts of 200 output ids each, the spec server's and the plain twin's


def _history(path: Path, runs: list[tuple[float, float, str | None]]) -> Path:
    """A history whose runs' spec servers take this prefill and this rest (ms a repeat),
    with this injected slowdown (or none); the plain twins are always 400 ms, 10 of prefill."""
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id, scenario, fingerprint)")
        connection.execute("CREATE TABLE phases (run_id, mode, phase, repeat, cycles, mean_ms)")
        connection.execute("CREATE TABLE samples (run_id, mode, metric, repeat, value)")
        connection.execute("CREATE TABLE outputs (run_id, spec_ids, plain_ids)")
        for run, (prefill, rest, injected) in enumerate(runs, 1):
            fingerprint = {"injected_slowdown": injected} if injected else {}
            connection.execute(
                "INSERT INTO runs VALUES (?, 's', ?)", (run, json.dumps(fingerprint))
            )
            ids = json.dumps(list(range(200)))
            connection.executemany("INSERT INTO outputs VALUES (?, ?, ?)", [(run, ids, ids)] * 2)
            for repeat in (0, 1, 2):
                for mode, pre, wall in (("spec", prefill, prefill + rest), ("plain", 10.0, 400.0)):
                    # One prefill of `pre` ms, or two of half, as a batch over two prefills.
                    cycles = 2 if repeat == 2 else 1
                    connection.execute(
                        "INSERT INTO phases VALUES (?, ?, 'prefill', ?, ?, ?)",
                        (run, mode, repeat, cycles, pre / cycles),
                    )
                    connection.execute(
                        "INSERT INTO samples VALUES (?, ?, 'output_tok_s', ?, ?)",
                        (run, mode, repeat, TOKENS / wall * 1e3),
                    )
    return path


def _cells(text: str, name: str) -> list[str]:
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_launches_that_differ_in_their_prefill_alone_show_it_as_the_wall_s_spread(
    tmp_path: Path,
) -> None:
    parts = importlib.import_module("wall_parts")
    # Three launches: prefill 10, 20 and 30 ms, the rest always 170 ms. Run 4 had a slowdown
    # injected: no launch of unchanged code, and left out.
    db = _history(
        tmp_path / "h.db",
        [(10.0, 170.0, None), (20.0, 170.0, None), (30.0, 170.0, None), (90.0, 400.0, "cycle=0.1")],
    )
    text = parts.table([db])
    spec = _cells(text, f"{db}, s, spec")
    # Runs, mean wall, prefill mean (range); then the wall's spread between launches (sd 10 ms
    # over a mean wall of 190 ms), all of it the prefill's, none the rest's; none within a run.
    assert spec[1:4] == ["3", "190.0", "20.0 (10.0-30.0)"]
    assert spec[4:8] == ["5.26%", "5.26%", "0.00%", "0.00%"]
    assert spec[8] == "+1.00"
    plain = _cells(text, f"{db}, s, plain")
    assert plain[1:8] == ["3", "400.0", "10.0 (10.0-10.0)", "0.00%", "0.00%", "0.00%", "0.00%"]
    assert plain[8] == "-"  # nothing moved: no correlation to state


def test_replan_levels_a_measured_point_to_the_profiled_launch_s_prefill() -> None:
    """benchmarks/replan.py judges the model on the sweep's points with each launch's own
    prefill replaced by the profiled run's: the model's error without the launches' states."""
    replan = importlib.import_module("replan")
    # Run 3 measured 2000 tokens in a 200 ms repeat, 30 ms of it prefill; the profiled run 7
    # prefilled in 10 ms: levelled, run 3 makes its tokens in 180 ms.
    parts = {3: (30.0, 200.0, 2000), 7: (10.0, 150.0, 2000)}
    assert replan.levelled(parts, 3, 7) == pytest.approx(2000 / 180 * 1e3)
    assert replan.levelled(parts, 3, 3) == pytest.approx(2000 / 200 * 1e3)  # its own: as measured
    assert replan.levelled(parts, 4, 7) is None and replan.levelled(parts, 3, None) is None


def test_replan_reads_each_run_s_median_prefill_wall_and_tokens_from_the_history(
    tmp_path: Path,
) -> None:
    replan = importlib.import_module("replan")
    db = _history(tmp_path / "h.db", [(10.0, 170.0, None), (30.0, 170.0, None)])
    parts = replan.prefill_and_wall(f"sqlite:///{db}")
    assert parts.keys() == {1, 2}
    assert parts[1] == pytest.approx((10.0, 180.0, TOKENS)) and parts[1][2] == TOKENS
    assert parts[2] == pytest.approx((30.0, 200.0, TOKENS))
    # Run 2 levelled to run 1's prefill makes its tokens in run 1's time.
    assert replan.levelled(parts, 2, 1) == pytest.approx(TOKENS / 180.0 * 1e3)
    assert replan.prefill_and_wall("postgresql://host/db") == {}  # SQLite files only
