"""--cpu-costs (tests/cpu_costs.py): the tests that cost the most CPU, child processes included,
listed after the run, in one process and under -n."""

from __future__ import annotations

import re

import pytest

from .conftest import REPO

CONFTEST = """
from tests import cpu_costs

def pytest_addoption(parser):
    cpu_costs.add_option(parser)

def pytest_configure(config):
    cpu_costs.configure(config)
"""
# Fixed work, not a fixed time: its CPU seconds do not depend on the machine's load. The
# child's loop costs about half a second of CPU; the sleeper, a hundredth of that.
TESTS = """
import subprocess, sys, time

def test_a_child_that_computes():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(6_000_000))"], check=True)

def test_a_sleeper():
    time.sleep(0.5)
"""
ROW = re.compile(r"^ +(?P<seconds>[\d.]+) +[\d.]+% +(?P<test>\S+)$", re.M)


def _costs(output: str) -> dict[str, float]:
    """The listed tests' CPU seconds, by test name, in the order listed."""
    assert re.search(r"CPU seconds: \d+ in 2 tests", output), output
    return {row["test"].split("::")[-1]: float(row["seconds"]) for row in ROW.finditer(output)}


def _check(costs: dict[str, float]) -> None:
    assert list(costs) == ["test_a_child_that_computes", "test_a_sleeper"], costs
    assert costs["test_a_child_that_computes"] > 10 * max(costs["test_a_sleeper"], 0.01), costs


def test_a_child_processes_cpu_is_charged_to_its_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_costs=TESTS)
    listed = pytester.runpytest("-p", "no:cacheprovider", "--cpu-costs", "5")
    listed.assert_outcomes(passed=2)
    _check(_costs(listed.stdout.str()))

    unlisted = pytester.runpytest("-p", "no:cacheprovider")
    unlisted.assert_outcomes(passed=2)
    assert "CPU seconds" not in unlisted.stdout.str()


@pytest.mark.slow  # three fresh pytest processes
def test_each_worker_measures_its_own_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_costs=TESTS)
    run = ("-p", "no:cacheprovider", "--cpu-costs", "5", "-n", "2")
    result = pytester.runpytest_subprocess(*run)
    result.assert_outcomes(passed=2)
    _check(_costs(result.stdout.str()))
