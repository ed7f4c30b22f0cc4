"""Speculative outputs must be the plain outputs, token for token."""

from __future__ import annotations

from perfgate.session import ScenarioRun


def test_outputs_equivalent(scenario_run: ScenarioRun) -> None:
    report = scenario_run.measurement().equivalence
    assert report.ok, report.summary()
