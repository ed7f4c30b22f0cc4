"""benchmarks/suite_processes.py: the test suite's CPU by kind of process, as a developer reads
it when making the suite cheaper."""

from __future__ import annotations

import importlib
import os
import subprocess
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


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-m", "perfgate.engines.embedded.server", "--model-path", "m"], "embedded engine server"),
        (["-m", "perfgate", "run", "--no-gate"], "perfgate run"),
        (["-m", "pytest", "-q"], "pytest"),
        (["-m", "tests.embedded.interpreted"], "python -m tests.embedded.interpreted"),
    ],
)
def test_a_process_is_told_by_the_command_line_it_logged_as_it_started(
    argv: list[str], expected: str
) -> None:
    assert census.kind(argv) == expected


def _record(pid: int, ppid: int, name: str, utime: int, stime: int = 0) -> str:
    """A line of `dump-acct`: times in ticks of 1/100 s."""
    return (
        f"{name:<16}|v3|{utime:9.2f}|{stime:9.2f}|   100.00|     0|     0|  2924.00|     0.00|"
        f"{pid:8d}|{ppid:8d}|     |       0|__      |Mon Dec  7 06:24:16 2026"
    )


def test_accounting_counts_every_process_below_pytest_and_names_the_unlogged_by_ancestry() -> None:
    dump = "\n".join(
        [
            _record(10, 1, "python", 300, 50),  # pytest itself: 3.5 s
            _record(11, 10, "python", 800),  # an xdist worker
            _record(12, 11, "python", 190, 10),  # a server that logged its start, then killed
            _record(13, 11, "python", 40),  # the worker's child with an environment of its own
            _record(14, 13, "postgres", 25),  # a program, not Python
            _record(15, 12, "pt_gloo_runloop", 70),  # a logged Python named by its last thread
            _record(99, 1, "python", 5000),  # another process of the machine
        ]
    )
    starts = {
        10: (1, ("-m", "pytest", "-n", "3")),
        11: (10, ("-c",)),
        12: (11, ("-m", "perfgate.engines.embedded.server", "--port", "1")),
        15: (12, ("-m", "perfgate.engines.embedded.rank")),
    }
    named = census.every_process(census.read_accounting(dump), starts, root=10)
    by_kind = {name: (count, round(cpu, 2)) for name, (count, cpu) in census._totals(named)}
    assert by_kind == {
        "pytest": (1, 3.5),
        census._WORKERS: (1, 8.0),
        "embedded engine server": (1, 2.0),
        f"Python that logged no start, under: {census._WORKERS}": (1, 0.4),
        "postgres": (1, 0.25),
        "python -m perfgate.engines.embedded.rank": (1, 0.7),
    }
    table = census.accounting_table(named, wall_s=9.0, top=10)
    assert "6 processes of the run took 15 CPU s" in table
    assert "| embedded engine server | 1 | 2.0 | 13.5% | 2.00 |" in table


def test_accounting_without_its_tools_is_exit_69_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no accton, no dump-acct
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_never.py").write_text("def test_never():\n    raise SystemExit(3)\n")
    assert census.main(["--accounting", "--", "-q", "test_never.py"]) == 69
    error = capsys.readouterr().err
    assert "--accounting: accton is not on PATH" in error and "apt-get install acct" in error


@pytest.mark.parametrize("spelling", [["-m", "json.tool"], ["-mjson.tool"]])
def test_a_process_logs_its_module_as_it_starts_however_m_is_spelt(
    tmp_path: Path, spelling: list[str]
) -> None:
    (tmp_path / "sitecustomize.py").write_text(census.SITECUSTOMIZE)
    log = tmp_path / "processes.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), census.LOG_ENV: str(log)}
    child = subprocess.run(  # an interpreter option first: the module is not orig_argv[1]
        [sys.executable, "-X", "utf8", *spelling, "--help"], env=env, capture_output=True
    )
    assert child.returncode == 0
    ((pid, (ppid, argv)),) = census.read_starts(log).items()
    assert ppid == os.getpid() and pid > 0
    assert census.kind(argv) == "python -m json.tool" and argv[-1] == "--help"
