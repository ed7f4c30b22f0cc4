"""Order the suites so each server starts once: throughput (in the pipeline's MEASURE_ORDER) first;
keep the session's ending to the verdict unless the user asks pytest for more."""

from __future__ import annotations

import pytest

from perfgate.measure import TimedLoop, run_rounds
from perfgate.pipeline import MEASURE_ORDER

_MODULE_ORDER = ("test_throughput", "test_phases", "test_equivalence")
_UNUSED_FIXTURE = "Benchmark fixture was not used at all in this test"
_BENCHMARK_WARNING = "pytest_benchmark.logger.PytestBenchmarkWarning"


def pytest_configure(config: pytest.Config) -> None:
    """pytest's slowest durations and pytest-benchmark's table only where the user asked for
    them (-v; --durations; a --benchmark-* flag): the verdict, printed after them, is what a
    gate session is read for. The repeats are timed by pytest-benchmark all the same.

    A throughput test that a refusal ends before it times anything leaves pytest-benchmark's
    fixture unused, and pytest-benchmark warns of that; under `filterwarnings = error` (a
    common setting, and perfgate's own) the warning became a second error with a page of
    pytest-benchmark's traceback under the refusal. The refusal is the news: that warning is
    ignored in gate sessions."""
    config.addinivalue_line("filterwarnings", f"ignore:{_UNUSED_FIXTURE}:{_BENCHMARK_WARNING}")
    if config.get_verbosity() > 0:
        return
    asked = [str(arg) for arg in config.invocation_params.args]
    if not any(arg.startswith("--durations") for arg in asked):
        config.option.durations = None
    if not any(arg.startswith("--benchmark-") for arg in asked):
        config.option.benchmark_quiet = True
        # pytest-benchmark read that flag when it configured itself, if that came first.
        benchmarks = getattr(config, "_benchmarksession", None)
        if benchmarks is not None:
            benchmarks.quiet = True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:  # the timed servers in MEASURE_ORDER first
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""  # type: ignore[attr-defined]
        order = _MODULE_ORDER.index(module) if module in _MODULE_ORDER else len(_MODULE_ORDER)
        # The timed measurements before anything that judges them: pytest may group a
        # session-scoped parameter's tests so that the verdicts come between plain and spec.
        timed = getattr(item, "originalname", "") == "test_throughput"
        if not timed:
            return order, len(MEASURE_ORDER)
        callspec = getattr(item, "callspec", None)
        mode = callspec.params.get("mode") if callspec else None
        return order, MEASURE_ORDER.index(mode) if mode in MEASURE_ORDER else 0

    items.sort(key=rank)  # stable: keeps pytest's order among equals


@pytest.fixture
def timed_loop(benchmark: object) -> TimedLoop:
    """Time the repeats with pytest-benchmark, so `--benchmark-json` holds them too."""
    if getattr(benchmark, "disabled", True):
        return run_rounds

    def loop(one_repeat: object, rounds: int) -> None:
        benchmark.pedantic(one_repeat, rounds=rounds, iterations=1, warmup_rounds=0)  # type: ignore[attr-defined]

    return loop
