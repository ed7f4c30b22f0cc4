"""Measure a scenario's serving load on a running server: perfgate's figures per repeat, and
SGLang's own benchmark once beside them when it is installed (or required)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError
from perfgate.progress import SILENT, Reporter
from perfgate.serving.figures import SERVING_METRICS, summarize_load
from perfgate.serving.generator import run_load
from perfgate.serving.load import build_requests
from perfgate.serving.sglang_bench import bench_command, run_bench
from perfgate.sglang.facts import installed_versions

if TYPE_CHECKING:
    from perfgate.config import Scenario


def cross_check_python(scenario: Scenario, env: Mapping[str, str] | None = None) -> str | None:
    """The interpreter that runs SGLang's benchmark, or None: off, or "auto" without SGLang.

    A cross-check that is required ("sglang") but has no SGLang is a ConfigError.
    """
    load = scenario.serving
    if load is None or load.cross_check == "off":
        return None
    python = load.cross_check_python or scenario.python or sys.executable
    environment = {**(os.environ if env is None else env), **scenario.env}
    if installed_versions(python, environment).sglang is not None:
        return python
    if load.cross_check == "sglang":
        raise ConfigError(
            f"SGLang is not installed in {python}",
            field=f"scenarios.{scenario.name}.serving.cross_check_python",
            fix='point it at an interpreter with SGLang, or set cross_check = "auto"',
        )
    return None


def measure_serving(
    base_url: str,
    scenario: Scenario,
    label: str,
    workdir: Path,
    progress: Reporter = SILENT,
) -> dict[str, tuple[float, ...]]:
    """Send the scenario's load `scenario.repeats` times; return the serving metrics' samples
    (one value per load), with SGLang's figures (one run) when it cross-checks."""
    load = scenario.serving
    assert load is not None, "a scenario without a serving table has no serving load"
    requests = build_requests(load, scenario.prompts, scenario.max_new_tokens)
    values: dict[str, list[float]] = {metric: [] for metric in SERVING_METRICS}
    with progress.step(f"{scenario.name} {label}", total=scenario.repeats, unit="load") as step:
        for _ in range(scenario.repeats):
            step.advance()
            run = run_load(base_url, load, requests, scenario.request_timeout_s)
            for metric, value in summarize_load(run).items():
                values[metric].append(value)
    samples = {metric: tuple(v) for metric, v in values.items()}
    python = cross_check_python(scenario)
    if python is not None:
        with progress.step(f"{scenario.name} {label}: sglang.benchmark.serving"):
            folder = workdir / f"sglang-bench-{label}"
            folder.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, **scenario.env}
            command = bench_command(python, base_url, load, requests, folder, env)
            figures = run_bench(command, requests, scenario.request_timeout_s)
        samples |= {metric: (value,) for metric, value in figures.items()}
    return samples
