"""Throughput: tok/s of the plain twin and the speculative server, accept length, speedup."""

from __future__ import annotations

import pytest

from perfgate.engines.server_commands import Mode
from perfgate.measure import TimedLoop
from perfgate.pipeline import MEASURE_ORDER
from perfgate.session import GateSession

THROUGHPUT_METRICS = ("output_tok_s", "speedup", "decode_tok_s", "accept_length", "ttft_ms")


@pytest.mark.parametrize("mode", MEASURE_ORDER)  # each server timed in its own test
def test_throughput(
    perfgate_session: GateSession, perfgate_scenario: str, mode: Mode, timed_loop: TimedLoop
) -> None:
    measured_before = perfgate_session.measured(perfgate_scenario, mode)
    result = perfgate_session.server_result(perfgate_scenario, mode, timed_loop)
    tok_s = result.samples["output_tok_s"]
    assert len(tok_s) == perfgate_session.scenarios[perfgate_scenario].repeats
    assert all(value > 0 for value in tok_s)
    if result.reused_from is not None:
        pytest.skip(f"plain figures reused from run #{result.reused_from}, not timed in this run")
    if measured_before:
        pytest.skip(f"{mode} server measured by an earlier test, not timed by pytest-benchmark")


def test_throughput_verdicts(perfgate_session: GateSession, perfgate_scenario: str) -> None:
    verdicts = perfgate_session.failing_verdicts(perfgate_scenario)
    failed = [
        f"{v.metric}: {v.status.value}: {v.message}"
        for v in verdicts
        if v.metric in THROUGHPUT_METRICS
    ]
    assert not failed, "\n".join(failed)
