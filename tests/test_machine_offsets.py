"""benchmarks/machine_offsets.py: how far each machine sits from the approved runs, and verify
paired with the same run's plain decode step, read from a history's samples."""

from __future__ import annotations

import importlib
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def _history(
    path: Path, runs: list[tuple[str | None, float, float, str | None]], ttft: float | None = None
) -> Path:
    """Runs of (machine, GPU speed factor, verify slowdown, injected): every repeat's phases
    and the plain step take their times times the factor, verify also times the slowdown;
    with `ttft`, both servers' time to first token that many ms times the run's number."""
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id, fingerprint)")
        connection.execute("CREATE TABLE samples (run_id, mode, metric, repeat, value)")
        for run, (machine, factor, slowdown, injected) in enumerate(runs, 1):
            fingerprint = {"machine": machine} if machine else {}
            if injected:
                fingerprint["injected_slowdown"] = injected
            connection.execute("INSERT INTO runs VALUES (?, ?)", (run, json.dumps(fingerprint)))
            for repeat in range(3):
                values = {
                    ("spec", "output_tok_s"): 1000 / factor,
                    ("plain", "output_tok_s"): 500 / factor,
                    ("spec", "verify_ms"): 2.0 * factor * slowdown,
                    ("spec", "draft_ms"): 0.5 * factor,
                    ("spec", "draft_extend_ms"): 0.25 * factor,
                    ("spec", "cycle_ms"): 3.0 * factor,
                    ("plain", "cycle_ms"): 1.0 * factor,
                }
                if ttft is not None:
                    values |= {("spec", "ttft_ms"): ttft * run, ("plain", "ttft_ms"): ttft * run}
                connection.executemany(
                    "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                    [(run, m, name, repeat, v) for (m, name), v in values.items()],
                )
    return path


def _cells(text: str, start: str) -> list[str]:
    (row,) = [line for line in text.splitlines() if line.startswith(start)]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_a_faster_machine_moves_verify_and_not_verify_over_the_plain_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offsets = importlib.import_module("machine_offsets")
    db = _history(
        tmp_path / "history.db",
        [
            ("gpus-a", 1.0, 1.0, None),
            ("gpus-a", 1.0, 1.0, None),
            (None, 0.99, 1.0, None),  # before machines were named: --host labels it
            ("gpus-b", 0.99, 1.02, "verify +2.0%"),
        ],
    )
    out = tmp_path / "offsets.md"
    assert offsets.main([str(db), "--reference", "1-2", "--host", "B=3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    # run, machine, injected, spec tok/s, plain tok/s, verify, draft, draft_extend, cycle, paired
    assert _cells(text, "| 3 |")[1:] == [
        "B", "none", "+1.01%", "+1.01%", "-1.00%", "-1.00%", "-1.00%", "-1.00%", "+0.00%",
    ]  # fmt: skip
    assert _cells(text, "| 4 |")[5] == "+0.98%" and _cells(text, "| 4 |")[9] == "+2.00%"
    assert _cells(text, "| gpus-a | none |")[2:] == ["2"] + ["+0.00%"] * 7


def test_a_machine_slower_on_the_host_s_side_shows_in_its_time_to_first_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offsets = importlib.import_module("machine_offsets")
    # Runs 1-2 approved (ttft 4 and 8 ms: mean 6), run 3 the same GPU with ttft 12 ms.
    runs = [("gpus-a", 1.0, 1.0, None)] * 2 + [("gpus-e", 1.0, 1.0, None)]
    db = _history(tmp_path / "history.db", runs, ttft=4.0)
    assert offsets.main([str(db), "--reference", "1-2"]) == 0
    text = capsys.readouterr().out
    assert "| verify_steps | spec ttft | plain ttft |" in text
    assert _cells(text, "| 3 |")[3:] == ["+0.00%"] * 7 + ["+100.00%"] * 2
    assert _cells(text, "| gpus-e | none |")[-2:] == ["+100.00%", "+100.00%"]


def test_bad_input_is_exit_64_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    offsets = importlib.import_module("machine_offsets")
    db = _history(tmp_path / "history.db", [("gpus-a", 1.0, 1.0, None)])
    assert offsets.main([str(db), "--reference", "1-3"]) == 64
    assert "no complete run 2, 3 to refer to (--reference)" in capsys.readouterr().err
    assert offsets.main([str(db), "--reference", "one"]) == 64
    assert "--reference and --host take run ids" in capsys.readouterr().err
    (tmp_path / "not.db").write_text("")
    assert offsets.main([str(tmp_path / "not.db"), "--reference", "1"]) == 64
    assert "not a perfgate history" in capsys.readouterr().err
