"""The pytest plugin, driven through pytester: suites, options, exit status, inertness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.commands.run import SUITES

from .conftest import HERE_PROFILE, TINY_SCENARIO, run_perfgate, write_config
from .short_scenario import SHORT_SCENARIO

pytestmark = pytest.mark.slow


def test_suites_run_under_pytest_with_benchmark_json(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # Two repeats: two timings in each server's benchmark data.
    config = write_config(tmp_path, SHORT_SCENARIO.replace("repeats = 1", "repeats = 2"))
    bench = tmp_path / "bench.json"
    result = pytester.runpytest_subprocess(
        str(SUITES),
        f"--perfgate-config={config}",
        "--perfgate-no-gate",
        f"--perfgate-report={tmp_path / 'report.html'}",
        f"--benchmark-json={bench}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=6)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*perfgate*", f"tiny on {HERE_PROFILE}: run #1 PASS", "*perfgate exit code: 0"]
    )
    names = sorted(b["name"] for b in json.loads(bench.read_text())["benchmarks"])
    assert names == ["test_throughput[tiny-plain]", "test_throughput[tiny-spec]"]
    assert all(len(b["stats"]["data"]) == 2 for b in json.loads(bench.read_text())["benchmarks"])
    assert (tmp_path / "report.html").is_file()


def test_both_servers_are_timed_whatever_order_pytest_collects_the_tests_in(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some pytest releases group a session-scoped parameter's tests so that the verdicts
    come between the two measurements; the suites put them back. The servers start in the
    plan's order (speculative, then plain) even where pytest asks for the plain one first."""
    config = write_config(tmp_path, SHORT_SCENARIO)
    pytester.makepyfile(
        reorder="""
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    verdicts = [i for i in items if i.originalname == "test_throughput_verdicts"]
    for item in verdicts:
        items.remove(item)
        items.insert(1, item)  # between the two servers' tests
    plain = [i for i in items if i.name == "test_throughput[tiny-plain]"]
    for item in plain:
        items.remove(item)
        items.insert(0, item)  # the plain server asked for first
"""
    )
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    bench = tmp_path / "bench.json"
    result = pytester.runpytest_subprocess(
        str(SUITES), f"--perfgate-config={config}", f"--perfgate-report={tmp_path / 'r.html'}",
        f"--benchmark-json={bench}", "-p", "no:cacheprovider", "-p", "reorder", "-v",
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*test_throughput_verdicts*"])
    out = result.stdout.str()
    starts = [line for line in out.splitlines() if line.endswith("server") and "starting" in line]
    assert starts == ["tiny: starting spec server", "tiny: starting plain server"], out
    result.assert_outcomes(passed=6)
    names = sorted(b["name"] for b in json.loads(bench.read_text())["benchmarks"])
    assert names == ["test_throughput[tiny-plain]", "test_throughput[tiny-spec]"]


def test_bad_config_sets_the_documented_exit_status(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    config = write_config(tmp_path, TINY_SCENARIO.replace("steps = 3", "steps = -3"))
    result = pytester.runpytest_subprocess(
        str(SUITES), f"--perfgate-config={config}", "-p", "no:cacheprovider"
    )
    assert result.ret == 64
    result.stdout.fnmatch_lines(
        ["*perfgate: error: *perfgate.toml:scenarios.tiny.steps: must be an integer*"]
    )
    assert not (tmp_path / "history.db").exists()


def test_a_refusal_before_launch_is_said_once_and_every_test_of_its_scenario_fails(
    tmp_path: Path,
) -> None:
    """The preflight refuses the scenario's interpreter: no server starts, the six tests fail."""
    config = TINY_SCENARIO.replace(
        'device = "cpu"\n', 'device = "cpu"\npython = "/no/such/python"\n'
    )
    write_config(tmp_path, config)
    done = run_perfgate("run", cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    refusal = "scenarios.tiny.python: /no/such/python is not an executable file"
    failures = done.stdout.split("= FAILURES =")[1].split("short test summary info")[0]
    assert failures.count(refusal) == 1 and "During handling" not in failures, done.stdout
    later = "perfgate: scenario 'tiny' was not measured: see test_throughput[tiny-spec] above"
    assert failures.count(later) == 5, done.stdout
    assert "6 failed" in done.stdout
    verdict = done.stdout.split("= perfgate =")[1]
    assert verdict.count(refusal) == 1 and verdict.strip().endswith("perfgate exit code: 64")


def test_a_refusal_under_strict_warnings_is_the_only_news(tmp_path: Path) -> None:
    """A project with `filterwarnings = error` (perfgate's own has it): the refused scenario's
    throughput tests fail with the refusal, and pytest-benchmark's warning that its fixture
    went unused is not turned into a second error under it."""
    config = TINY_SCENARIO.replace(
        'device = "cpu"\n', 'device = "cpu"\npython = "/no/such/python"\n'
    )
    write_config(tmp_path, config)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n', encoding="utf-8"
    )
    done = run_perfgate("run", cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert "configfile: pyproject.toml" in done.stdout, done.stdout
    assert "PytestBenchmarkWarning" not in done.stdout, done.stdout
    assert "6 failed in" in done.stdout and "error" not in done.stdout.split("= FAILURES =")[0]


def test_plugin_is_inert_in_other_suites(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    assert "perfgate" not in result.stdout.str().split("plugins:")[-1].split("\n", 1)[1]
