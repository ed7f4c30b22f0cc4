"""Speculative outputs must be the plain outputs, token for token (near ties aside)."""

from __future__ import annotations

from perfgate.pipeline import ScenarioRun


def test_outputs_equivalent(scenario_run: ScenarioRun) -> None:
    # Every run of the scenario: the first, and any measured again for an inconclusive verdict.
    # A scenario with `equivalence = "report"` (simulated acceptance) is compared, not gated.
    for index, measurement in enumerate(scenario_run.measurements(), start=1):
        assert measurement.outputs_pass, f"run {index}: {measurement.equivalence.summary()}"
