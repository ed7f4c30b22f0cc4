"""Speculative outputs must be the plain outputs, token for token (near ties aside)."""

from __future__ import annotations

from perfgate.session import ScenarioRun


def test_outputs_equivalent(scenario_run: ScenarioRun) -> None:
    # Every run of the scenario: the first, and any measured again for an inconclusive verdict.
    for index, measurement in enumerate(scenario_run.measurements(), start=1):
        report = measurement.equivalence
        assert report.ok, f"run {index}: {report.summary()}"
