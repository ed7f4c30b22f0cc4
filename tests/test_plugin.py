"""The pytest plugin, driven through pytester: suites, options, exit status, inertness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.commands.run import SUITES

from .conftest import HERE_PROFILE, REPO, TINY_SCENARIO, run_perfgate, write_config
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


def _suites_with(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, **plugin: str
) -> pytest.RunResult:
    """perfgate's suites under pytest on the tiny scenario, with the one plugin given (its
    module's name and source) loaded first."""
    ((name, source),) = plugin.items()
    pytester.makepyfile(**{name: source})
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{REPO}")
    config = write_config(pytester.path, TINY_SCENARIO)
    return pytester.runpytest_subprocess(
        str(SUITES), f"--perfgate-config={config}", "--perfgate-report=", "-p", name,
        "-p", "no:cacheprovider",
    )  # fmt: skip


CRASHING_SERVERS = '''
"""The session's servers faked, the speculative one failing as a bug in perfgate would."""
import functools

from perfgate import session
from perfgate.pipeline import ServerPair
from tests.factories import mode_result


def launch(scenario, mode, folder, *, timed_loop, checked, progress, while_up):
    if mode == "spec":
        raise ValueError("invalid literal for int() with base 10: 'GPU 0'")
    timed_loop(lambda: None, scenario.repeats)
    return mode_result(mode, 100.0, repeats=scenario.repeats)


def pytest_configure(config):
    session.ServerPair = functools.partial(ServerPair, launch=launch)
'''


def test_a_bug_while_measuring_exits_70_with_its_traceback_once_never_1(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exit 1 is the regression's: CI, its job summary and a plan's record read it as measured.
    result = _suites_with(pytester, monkeypatch, crashingservers=CRASHING_SERVERS)
    assert result.ret == 70, result.stdout.str()
    out = result.stdout.str()
    bug = (
        "measuring scenario 'tiny' failed unexpectedly (ValueError: invalid literal for int()"
        " with base 10: 'GPU 0'); this is a bug in perfgate, not a verdict: please report it"
        " with the traceback"
    )
    failures = out.split("= FAILURES =")[1].split("short test summary info")[0]
    assert failures.count(bug) == 1 and failures.count("Traceback (most recent call last)") == 1
    assert 'crashingservers.py", line 11, in launch' in failures  # where it failed
    verdict = out.split("= perfgate =")[1]
    assert f"tiny: not measured: {bug}" in verdict
    assert verdict.strip().endswith("perfgate exit code: 70"), verdict


CRASHING_JUDGE = '''
"""The session's servers faked, and its verdicts failing as a bug in perfgate would."""
import functools

from perfgate import session
from perfgate.pipeline import ServerPair
from tests.factories import mode_result


def launch(scenario, mode, folder, *, timed_loop, checked, progress, while_up):
    timed_loop(lambda: None, scenario.repeats)
    return mode_result(mode, 100.0 if mode == "plain" else 120.0, repeats=scenario.repeats)


def failing_verdicts(self, name):
    raise KeyError("output_tok_s")


def pytest_configure(config):
    session.ServerPair = functools.partial(ServerPair, launch=launch)
    session.GateSession.failing_verdicts = failing_verdicts
'''


def test_a_bug_outside_the_measurement_exits_70_naming_each_test_it_failed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _suites_with(pytester, monkeypatch, crashingjudge=CRASHING_JUDGE)
    assert result.ret == 70, result.stdout.str()
    result.assert_outcomes(passed=4, failed=2)  # the two verdict tests; pytest shows each trace
    verdict = result.stdout.str().split("= perfgate =")[1]
    for test in (
        "test_throughput.py::test_throughput_verdicts",
        "test_phases.py::test_phase_verdicts",
    ):
        assert (
            f"perfgate: internal error: perfgate/suites/{test}[tiny] failed unexpectedly"
            " (KeyError: 'output_tok_s'); this is a bug in perfgate, not a verdict"
        ) in " ".join(verdict.split()), verdict
    assert verdict.strip().endswith("perfgate exit code: 70"), verdict


CRASHING_PLAN = '''
"""The gate session's plan failing as a bug in perfgate would, before any test is collected."""
from perfgate import session


def broken_plan(*args, **kwargs):
    raise RuntimeError("the plan broke")


def pytest_configure(config):
    session.GatePlan = broken_plan
'''


def test_a_bug_before_the_session_starts_exits_70_with_its_traceback_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Raised while the tests are collected, it ended the session as "interrupted" (exit 2).
    result = _suites_with(pytester, monkeypatch, crashingplan=CRASHING_PLAN)
    assert result.ret == 70, result.stdout.str()
    out = result.stdout.str()
    assert out.count("Traceback (most recent call last)") == 1 and "During handling" not in out
    bug = (
        "starting the gate session failed unexpectedly (RuntimeError: the plan broke); this is"
        " a bug in perfgate, not a verdict: please report it with the traceback"
    )
    assert out.count(f"perfgate: {bug}") == 6  # each test of the suites, in a line
    verdict = out.split("= perfgate =")[1].strip().splitlines()
    assert verdict[-1] == f"perfgate: internal error: {bug}", verdict
    assert verdict[-2] == "RuntimeError: the plan broke" and "in broken_plan" in verdict[-4]
