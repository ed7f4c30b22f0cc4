"""The whole path, as users run it: record, approve a baseline, pass, and catch a regression."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .built_wheel import session_wheel
from .conftest import (
    HERE_PROFILE,
    REPO,
    SLOW_VERIFY_MS,
    TINY_SCENARIO,
    VERDICT_CODES,
    run_perfgate,
    verdict_table,
    write_config,
)
from .hang import HANG_S
from .in_process import perfgate_main
from .recorded import RecordedProject
from .short_scenario import SHORT_SCENARIO

pytestmark = pytest.mark.slow

FOREIGN = b"not a database " * 512


def _runs(db: Path) -> list[tuple[int, str]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT id, status FROM runs ORDER BY id").fetchall()


def test_record_approve_pass_then_catch_a_slower_verify(
    recorded_project: RecordedProject, tmp_path: Path
) -> None:
    # Three runs recorded with --no-gate (a verdict of one run each) and approved as the
    # baseline: the session's recorded project, copied.
    first = recorded_project.first_run
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in first
    assert "equivalence: 2/2 prompts token-identical" in first
    recorded_project.copy_to(tmp_path)
    db = tmp_path / "history.db"
    assert _runs(db) == [(1, "pass"), (2, "pass"), (3, "pass")]
    baseline = json.loads((tmp_path / "baselines" / HERE_PROFILE / "tiny.json").read_text())
    assert [r["run_id"] for r in baseline["runs"]] == [1, 2, 3]
    assert baseline["tolerances"]["verify_ms"] == 0.6

    # The same code is judged against the approved baseline and recorded; whether it passes is
    # the machine's load's call.
    second = run_perfgate("run", cwd=tmp_path)
    assert second.returncode in VERDICT_CODES, second.stdout + second.stderr
    assert re.search(rf"^tiny on {HERE_PROFILE}: run #\d+ [A-Z]+", second.stdout, re.M)
    said = " ".join(second.stdout.split())  # the verdict's lines wrap at 100 columns
    assert f"judged against the reviewed baseline baselines/{HERE_PROFILE}/tiny.json" in said
    for metric in ("output_tok_s", "verify_ms", "accept_length", "speedup"):
        assert metric in second.stdout
    before_slow = len(_runs(db))
    assert before_slow >= 4

    # A change that makes verify far slower: same config, same environment, slower code.
    slow = run_perfgate("run", cwd=tmp_path, env={"PERFGATE_DEBUG_VERIFY_DELAY_MS": SLOW_VERIFY_MS})
    assert slow.returncode == 1, slow.stdout + slow.stderr
    table = verdict_table(slow.stdout)
    assert table["verify_ms"] == "regression", slow.stdout
    # A regression fixes the build's outcome, so no run is measured to settle tok/s further.
    assert table["output_tok_s"] in ("regression", "inconclusive"), slow.stdout
    assert table["accept_length"] == "pass", slow.stdout
    runs = _runs(db)
    # Attribution, from the same runs: the verify phase took the cycle's extra time.
    judged = perfgate_main("gate", "--run", str(runs[-1][0]), "--json", cwd=tmp_path)
    verdicts = {v["metric"]: v for v in json.loads(judged.stdout)["verdicts"]}
    why = verdicts["output_tok_s"]["attribution"]["summary"]
    assert re.search(r"verify \+[\d.]+ ms/cycle \(\+\d+%\) explains \d+%", why), why
    assert runs[0] == (1, "pass")  # recorded with --no-gate: nothing judged
    assert runs[-1][1] == "regression" and len(runs) > before_slow

    report = (tmp_path / "reports" / "index.html").read_text()
    assert all(f"#{run_id}" in report for run_id, _ in runs)


@pytest.mark.parametrize(
    ("setup", "expected_code", "expected"),
    [
        (
            lambda p: (
                (p / "baselines" / HERE_PROFILE).mkdir(parents=True)
                or (p / "baselines" / HERE_PROFILE / "tiny.json").write_text("{")
            ),
            64,
            "tiny.json: is not valid JSON",
        ),
        (
            lambda p: write_config(p, TINY_SCENARIO.replace("repeats = 3", "repeats = -1")),
            64,
            "scenarios.tiny.repeats",
        ),
        (lambda p: (p / "history.db").write_bytes(FOREIGN), 64, "history.db"),
        (
            lambda p: (p / "reports").write_text("not a folder"),
            64,
            "reports: is a file, so --report",
        ),
    ],
    ids=["malformed-baseline", "bad-config", "foreign-history", "report-under-a-file"],
)
def test_bad_input_fails_before_any_server_starts(
    tmp_path: Path, setup, expected_code: int, expected: str
) -> None:  # type: ignore[no-untyped-def]
    write_config(tmp_path)
    setup(tmp_path)
    result = perfgate_main("run", cwd=tmp_path)  # refused before pytest starts: in this process
    assert result.returncode == expected_code, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("perfgate: error: ") and expected in line
    assert not (tmp_path / ".perfgate" / "runs").exists(), "no server was started"
    history = tmp_path / "history.db"
    assert not history.exists() or history.read_bytes() == FOREIGN, "nothing was written"


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ("perfgate.toml/r.html", "{root}/perfgate.toml: is a file, so --report {root}/perfgate.toml/r.html"),
        (".", "{root}: is a folder, but --report names a file to write"),
    ],
)  # fmt: skip
def test_a_report_path_that_cannot_be_written_is_refused_before_any_server_starts(
    tmp_path: Path, report: str, expected: str
) -> None:
    write_config(tmp_path)
    result = perfgate_main("run", "--no-gate", "--report", report, cwd=tmp_path)
    assert result.returncode == 64, result.stdout + result.stderr
    assert result.stderr.startswith(f"perfgate: error: {expected.format(root=tmp_path)}")
    assert not (tmp_path / ".perfgate").exists() and not (tmp_path / "history.db").exists()


@pytest.mark.parametrize(
    ("edit", "expected_code", "expected"),
    [
        (
            ('model = "perfgate/llama-tiny"', 'model = "perfgate/no-such-model"'),
            64,
            "refused its arguments",
        ),
        (
            # A missing interpreter is a config mistake, refused before any launch.
            ('device = "cpu"', 'device = "cpu"\npython = "/nonexistent/python3"'),
            64,
            "scenarios.tiny.python: /nonexistent/python3 is not an executable file",
        ),
    ],
    ids=["server-refuses", "no-such-interpreter"],
)
def test_a_server_that_fails_to_start_records_nothing(
    tmp_path: Path, edit: tuple[str, str], expected_code: int, expected: str
) -> None:
    write_config(tmp_path, TINY_SCENARIO.replace(*edit))
    result = run_perfgate("run", "--no-gate", cwd=tmp_path)
    assert result.returncode == expected_code, result.stdout + result.stderr
    assert expected in result.stdout
    assert _runs(tmp_path / "history.db") == []


def test_unknown_scenario_and_flag(tmp_path: Path) -> None:
    write_config(tmp_path)
    result = perfgate_main("run", "--scenario", "huge", cwd=tmp_path)
    assert result.returncode == 64
    assert "unknown scenario 'huge'; choose one of: tiny" in result.stderr
    assert perfgate_main("run", "--no-such-flag", cwd=tmp_path).returncode == 64


_COUNTING_PLANS = """
import sys
from perfgate import pipeline, session
from perfgate.cli import main

built = []
class Counted(pipeline.GatePlan):
    def __init__(self, *args, **kwargs):
        built.append(self)
        super().__init__(*args, **kwargs)

pipeline.GatePlan = Counted
session.GatePlan = Counted
sessions = []
original = session.GateSession.__init__
def init(self, *args, **kwargs):
    original(self, *args, **kwargs)
    sessions.append(self)
session.GateSession.__init__ = init
code = main(sys.argv[1:])
print("plans built:", len(built), file=sys.stderr)
print("sessions over the plan built:", [s.plan is built[0] for s in sessions], file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`perfgate run --no-gate --report=` through _COUNTING_PLANS, from a folder that holds a
    copy of perfgate too (a checkout of another version, say). The script starts as the
    `perfgate` console script does: its own folder on sys.path, not the current one. One run,
    read by the test of the plan and by the test of the copy."""
    folder, scripts = tmp_path_factory.mktemp("counted"), tmp_path_factory.mktemp("scripts")
    decoy = folder / "perfgate"
    (decoy / "suites").mkdir(parents=True)
    (decoy / "__init__.py").write_text('raise ImportError("the copy in the current folder")\n')
    (decoy / "suites" / "__init__.py").write_text("")
    (decoy / "suites" / "conftest.py").write_text("")
    write_config(folder, SHORT_SCENARIO)
    script = scripts / "counting.py"
    script.write_text(_COUNTING_PLANS)
    return subprocess.run(
        [sys.executable, str(script), "run", "--no-gate", "--report="],
        cwd=folder, capture_output=True, text=True, timeout=HANG_S, check=False,
        env={k: v for k, v in os.environ.items() if k != "PERFGATE_DB_URL"},
    )  # fmt: skip


def test_perfgate_run_builds_its_plan_once_and_hands_it_to_the_session(
    counted_run: subprocess.CompletedProcess[str],
) -> None:
    """The plan `perfgate run` checks before pytest starts is the one the session measures
    by: not turned back into flags and built again from them."""
    result = counted_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in result.stdout
    assert "sessions over the plan built: [True]" in result.stderr
    assert "plans built: 1" in result.stderr


def test_perfgate_options_after_the_double_dash_are_refused(tmp_path: Path) -> None:
    write_config(tmp_path)
    result = run_perfgate("run", "--", "--perfgate-scenario=tiny", cwd=tmp_path)
    assert result.returncode == 64, result.stdout + result.stderr
    assert "perfgate's options were given to pytest after `--`" in result.stdout
    assert "give them to `perfgate run` itself, before `--`" in result.stdout


@pytest.mark.parametrize(
    ("pytest_args", "said"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["-k", "nothing"], "deselected"),
    ],
)
def test_pytest_s_own_usage_errors_are_bad_input(
    tmp_path: Path, pytest_args: list[str], said: str
) -> None:
    """pytest's exit 4 (a flag it does not know) and 5 (no test selected) are no codes of
    perfgate's table: they are bad input, 64, before any server starts."""
    write_config(tmp_path)
    result = run_perfgate("run", "--", *pytest_args, cwd=tmp_path)
    assert result.returncode == 64, result.stdout + result.stderr
    assert said in result.stdout + result.stderr
    assert "starting" not in result.stdout + result.stderr


def test_perfgate_run_of_an_installed_wheel_under_strict_warnings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """perfgate as `pip install perfgate` gives it (a wheel, not editable), in a project whose
    pytest turns warnings into errors: pytest, started inside `perfgate run`, finds perfgate
    imported already, and must not make a warning (an error here) of that."""
    site, project = tmp_path / "site", tmp_path / "project"
    # The wheel built once for the suite from this checkout's files (tests/built_wheel.py).
    built = session_wheel(request.config, tmp_path_factory)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    install = ["install", "--no-deps", "--target", str(site), str(built)]
    subprocess.run([*pip, *install], check=True, timeout=HANG_S)
    project.mkdir()
    write_config(project, SHORT_SCENARIO)
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_DB_URL"}
    env["PYTHONPATH"] = str(site)  # before the checkout's editable install
    where = [sys.executable, "-c", "import perfgate; print(perfgate.__file__)"]
    found = subprocess.run(where, cwd=project, env=env, capture_output=True, text=True)
    assert found.stdout.startswith(str(site)), found.stdout + found.stderr
    result = subprocess.run(
        [sys.executable, "-m", "perfgate", "run", "--no-gate", "--report="],
        cwd=project, env=env, capture_output=True, text=True, timeout=HANG_S, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in result.stdout
    assert "cannot be rewritten" not in out


def test_perfgate_run_with_the_plugin_named_in_pytest_plugins_under_strict_warnings(
    tmp_path: Path,
) -> None:
    """perfgate on PYTHONPATH, not installed (so no entry point), its plugin named in
    PYTEST_PLUGINS as a GPU machine's scripts do, in a project whose pytest turns warnings into
    errors: pytest marks the named plugin for rewriting and finds it imported already by
    `perfgate run`; that must not be a warning (an error here)."""
    site, project = tmp_path / "site", tmp_path / "project"
    shutil.copytree(
        REPO / "perfgate", site / "perfgate", ignore=shutil.ignore_patterns("__pycache__")
    )
    project.mkdir()
    write_config(project, SHORT_SCENARIO)
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
    )
    env = {"PYTHONPATH": str(site), "PYTEST_PLUGINS": "perfgate.plugin"}
    # As if not installed: the checkout's own install registers the plugin by its entry point.
    env["PYTEST_ADDOPTS"] = "-p no:perfgate"
    result = run_perfgate("run", "--no-gate", "--report=", cwd=project, env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in result.stdout
    assert "cannot be rewritten" not in out


def test_a_copy_of_perfgate_in_the_current_folder_is_never_imported(
    counted_run: subprocess.CompletedProcess[str],
) -> None:
    # The run started as the console script starts it, from a folder with a copy of perfgate
    # that raises on import: neither the command, nor the pytest it becomes, nor the servers
    # it starts may import that copy.
    result = counted_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in result.stdout
    assert "the copy in the current folder" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_command_run_from_another_copy_collects_the_suites_of_the_copy_pytest_imports(
    tmp_path: Path,
) -> None:
    # `python -m perfgate run` from a checkout while an installed perfgate comes first on the
    # path pytest starts with (as on a GPU machine with perfgate installed beside a checkout):
    # the command and pytest import different copies, and pytest must collect its own.
    installed = tmp_path / "site"
    shutil.copytree(
        REPO / "perfgate", installed / "perfgate", ignore=shutil.ignore_patterns("__pycache__")
    )
    checkout = tmp_path / "checkout"
    shutil.copytree(
        REPO / "perfgate", checkout / "perfgate", ignore=shutil.ignore_patterns("__pycache__")
    )
    write_config(checkout, SHORT_SCENARIO)
    result = run_perfgate("run", "--no-gate", cwd=checkout, env={"PYTHONPATH": str(installed)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ImportPathMismatchError" not in result.stdout + result.stderr
    assert f"tiny on {HERE_PROFILE}: run #1 PASS" in result.stdout
