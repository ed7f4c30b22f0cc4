"""benchmarks/suite_processes.py: the test suite's CPU by kind of process, as a developer reads
it when making the suite cheaper."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
census = importlib.import_module("suite_processes")

TESTS = """
import subprocess, sys

def test_spends_in_a_child():
    subprocess.run([sys.executable, "burn.py"], check=True)

def test_fails():
    assert False
"""


def test_a_child_s_cpu_is_told_by_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "burn.py").write_text("sum(i * i for i in range(3_000_000))\n")
    (tmp_path / "test_inner.py").write_text(TESTS)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "census.md"
    code = census.main(["--out", str(out), "--", "-q", "-p", "no:cacheprovider", "test_inner.py"])
    assert code == 1  # pytest's own exit: one test failed
    text = out.read_text()
    assert text in capsys.readouterr().out
    cells = [[c.strip(" `") for c in line.strip("|").split("|")] for line in text.splitlines()]
    rows = {row[0]: row for row in cells if len(row) > 2}
    assert rows["burn.py"][1] == "1" and float(rows["burn.py"][2]) > 0.05  # its loop
    assert rows["pytest"][1] == "1"  # the inner pytest itself
    logged, whole = text.split(" logged ")[1].split(" CPU s")[0], text.split(" took ")[1]
    assert float(logged) <= float(whole.split(" CPU s")[0]) + 0.5


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/r/perfgate/engines/embedded/server.py", "--port", "1"], "embedded engine server"),
        (
            ["/r/perfgate/engines/supervise.py", "--lifeline", "3", "--", "python", "-m"],
            "server supervisor",
        ),
        (["/r/perfgate/__main__.py", "run", "--no-gate"], "perfgate run"),
        (["-c"], "python -c (xdist workers, inline children)"),
        (["-"], "python - (a script on stdin)"),
        (["/r/benchmarks/plan_accuracy.py", "--rounds"], "benchmarks/plan_accuracy.py"),
        (["/v/lib/python3.11/site-packages/pip/__main__.py", "install"], "pip"),
    ],
)
def test_a_process_kind_is_read_from_its_command_line(argv: list[str], expected: str) -> None:
    assert census.kind(argv) == expected
