"""``--cpu-costs N``: after the run, the N tests that cost the most CPU seconds.

On 2 cores the suite's wall time is its CPU time over two, so CPU, not duration, says which
tests to make cheaper: a test that waits on a process costs little, one that compiles costs
much whatever its duration. Each test's figure is its process's CPU (user and system) over
setup, call and teardown, plus that of every child process it waited for (servers, compilers,
scripts), read from getrusage. Works under ``-n`` (each worker measures its own tests).
A process no parent waited for is not counted: where a test ends a `perfgate run` by a signal
that leaves its servers to another parent, the figure is a fraction of the cost
(tests/embedded/test_tp_run.py's SIGTERM and SIGKILL cases: about 1.5 of 6 CPU s).

    .venv/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder --cpu-costs 30
"""

from __future__ import annotations

import resource
from collections.abc import Generator
from typing import Any

import pytest

_START = pytest.StashKey[float]()
_PROPERTY = "cpu_s"


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-costs",
        type=int,
        default=0,
        metavar="N",
        help="after the run, list the N tests that cost the most CPU seconds (children included)",
    )


def configure(config: pytest.Config) -> None:
    """Measure each test where --cpu-costs is given; list them where the reports arrive."""
    count = config.getoption("cpu_costs")
    if count:
        config.pluginmanager.register(_Measure(), "cpu-costs-measure")
        if not hasattr(config, "workerinput"):  # the controller, or a lone process
            config.pluginmanager.register(_Costs(count), "cpu-costs-table")


def _cpu_s() -> float:
    own, children = (
        resource.getrusage(r) for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class _Measure:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_START] = _cpu_s()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None]:
        outcome: Any = yield
        if call.when == "teardown" and _START in item.stash:
            report: pytest.TestReport = outcome.get_result()
            report.user_properties.append((_PROPERTY, _cpu_s() - item.stash[_START]))


class _Costs:
    def __init__(self, count: int) -> None:
        self.count = count
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _PROPERTY:
                self.seconds[report.nodeid] = float(value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        total = sum(self.seconds.values())
        terminalreporter.write_sep("=", f"CPU seconds: {total:.0f} in {len(self.seconds)} tests")
        ranked = sorted(self.seconds.items(), key=lambda item: -item[1])[: self.count]
        for nodeid, seconds in ranked:
            share = 100 * seconds / total if total else 0.0
            terminalreporter.write_line(f"{seconds:8.1f}  {share:4.1f}%  {nodeid}")
