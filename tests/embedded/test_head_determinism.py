"""benchmarks/head_determinism.py: the head's draft steps run twice from the same seeds on the
CPU agree bit for bit under the math backend training uses, and the table says so; two runs
that part are told apart (exit 1)."""

from __future__ import annotations

import importlib
import sys

import pytest

from perfgate.engines.embedded import train
from perfgate.engines.embedded.corpus import Corpus

from ..conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def math_row(table: str) -> list[str]:
    (row,) = [line for line in table.splitlines() if line.startswith("| math |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


@pytest.mark.slow  # trains the tiny head twice: about 5 CPU s (with the corpus, if first: 7)
def test_two_runs_of_the_tiny_head_agree_bit_for_bit_and_the_table_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], corpus: Corpus
) -> None:
    # The script's main in this process: both runs it compares are its own, in one process
    # either way, and a child would first import torch and the engine afresh (2-3 CPU s).
    script = importlib.import_module("head_determinism")
    # The session's corpus, not a build of its own (2-4 CPU s): both runs read the same one.
    monkeypatch.setattr(train, "load_corpus", lambda: corpus)
    monkeypatch.setattr(sys, "argv", ["head_determinism.py", "--steps", "2"])
    code = script.main()
    out = capsys.readouterr().out
    assert code == 0, out
    cells = math_row(out)
    assert cells[1] == cells[2] and cells[3] == "0.00e+00" and cells[4] == cells[5]
    assert cells[6] == "yes"


def test_runs_that_part_exit_1_and_say_by_how_much(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a GPU whose backward adds in a different order each run would leave them."""
    script = importlib.import_module("head_determinism")
    runs = iter([([2.0, 1.5], "aaaa"), ([2.0, 1.25], "bbbb")])
    monkeypatch.setattr(script, "head_run", lambda *args: next(runs))
    monkeypatch.setattr(script.train, "load_training_corpus", lambda: None)
    monkeypatch.setattr(sys, "argv", ["head_determinism.py", "--steps", "2"])
    assert script.main() == 1
    cells = math_row(capsys.readouterr().out)
    assert cells[1:] == ["1.500000", "1.250000", "2.50e-01", "aaaa", "bbbb", "no"]


def test_no_steps_is_refused_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process, whose torch is imported already: a child would import it only to refuse.
    script = importlib.import_module("head_determinism")
    monkeypatch.setattr(sys, "argv", ["head_determinism.py", "--steps", "0"])
    with pytest.raises(SystemExit) as exited:
        script.main()  # as the script's `sys.exit(main())` ends its process
    assert exited.value.code == 2 and "--steps 0" in capsys.readouterr().err
