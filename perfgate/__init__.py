"""perfgate: a CI performance gate for speculative decoding.

Users import from here; the modules behind these names may move. Imports are lazy, so that
`import perfgate` stays cheap (it runs inside every probed server process too).

PYTEST_DONT_REWRITE: `perfgate run` starts pytest in its own process, where this package is
imported already; pytest, which marks a plugin's package for assertion rewriting, then warns
that it cannot rewrite it (an error under `filterwarnings = error`). Its modules assert
nothing a test reads; the gate suites, test files, are rewritten as ever.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfgate.baselines import Baseline, BaselineRun, load_baseline
    from perfgate.config import Config, Scenario, load_config
    from perfgate.equivalence import EquivalenceReport, compare_outputs
    from perfgate.errors import ConfigError, ExitCode, InfrastructureError, PerfgateError
    from perfgate.gate import Attribution, Status, Verdict, judge_metric, judge_runs
    from perfgate.measured_verdicts import judge_measurements
    from perfgate.pipeline import measure_scenario
    from perfgate.report import render_report
    from perfgate.results import Measurement, ModeResult, PhaseSummary, RunContext, RunRecord

_EXPORTS = {
    "Attribution": "perfgate.gate",
    "Baseline": "perfgate.baselines",
    "BaselineRun": "perfgate.baselines",
    "Config": "perfgate.config",
    "ConfigError": "perfgate.errors",
    "EquivalenceReport": "perfgate.equivalence",
    "ExitCode": "perfgate.errors",
    "InfrastructureError": "perfgate.errors",
    "Measurement": "perfgate.results",
    "ModeResult": "perfgate.results",
    "PerfgateError": "perfgate.errors",
    "PhaseSummary": "perfgate.results",
    "RunContext": "perfgate.results",
    "RunRecord": "perfgate.results",
    "Scenario": "perfgate.config",
    "Status": "perfgate.gate",
    "Verdict": "perfgate.gate",
    "compare_outputs": "perfgate.equivalence",
    "judge_measurements": "perfgate.measured_verdicts",
    "judge_metric": "perfgate.gate",
    "judge_runs": "perfgate.gate",
    "load_baseline": "perfgate.baselines",
    "load_config": "perfgate.config",
    "measure_scenario": "perfgate.pipeline",
    "render_report": "perfgate.report",
}

__all__ = [
    "Attribution",
    "Baseline",
    "BaselineRun",
    "Config",
    "ConfigError",
    "EquivalenceReport",
    "ExitCode",
    "InfrastructureError",
    "Measurement",
    "ModeResult",
    "PerfgateError",
    "PhaseSummary",
    "RunContext",
    "RunRecord",
    "Scenario",
    "Status",
    "Verdict",
    "compare_outputs",
    "judge_measurements",
    "judge_metric",
    "judge_runs",
    "load_baseline",
    "load_config",
    "measure_scenario",
    "render_report",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perfgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
