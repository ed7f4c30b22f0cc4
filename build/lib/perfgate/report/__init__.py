"""The HTML report: one self-contained file rendered from the history."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from perfgate import metrics
from perfgate.results import RunRecord

__all__ = ["render_report", "write_report"]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perfgate.report", "templates"),
    autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    undefined=jinja2.StrictUndefined,
)


@dataclass(frozen=True)
class Series:
    label: str
    css_class: str
    points: tuple[tuple[float, float], ...]  # (x, y) in the chart's pixel space


@dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    series: tuple[Series, ...]
    y_min: float
    y_max: float
    run_ids: tuple[int | None, ...]


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def tok_s_chart(runs: Sequence[RunRecord], width: int = 640, height: int = 200) -> Chart:
    """Spec and plain output tok/s (median per run), in run order."""
    raw = {
        mode: [_median(getattr(r.measurement, mode).samples.get("output_tok_s", ())) for r in runs]
        for mode in ("spec", "plain")
    }
    values = [v for vs in raw.values() for v in vs if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.1 or max(high * 0.1, 1.0)
    low, high = low - pad, high + pad
    step = width / max(len(runs) - 1, 1)

    def place(i: int, v: float) -> tuple[float, float]:
        return (round(i * step, 1), round(height - (v - low) / (high - low) * height, 1))

    series = tuple(
        Series(
            label=f"{mode} tok/s",
            css_class=mode,
            points=tuple(place(i, v) for i, v in enumerate(vs) if v is not None),
        )
        for mode, vs in raw.items()
    )
    return Chart("output tok/s", width, height, series, low, high, tuple(r.id for r in runs))


def phase_rows(run: RunRecord) -> list[dict[str, float | str]]:
    """Mean ms per cycle of each phase of the speculative server, `other` included."""
    phases = run.measurement.spec.phases
    means = {}
    for phase in (*metrics.NAMED_PHASES, metrics.CYCLE):
        values = [p.mean_ms for p in phases if p.phase == phase]
        if values:
            means[phase] = sum(values) / len(values)
    cycle = means.pop(metrics.CYCLE, 0.0)
    means[metrics.OTHER] = max(cycle - sum(means.values()), 0.0)
    return [
        {"phase": phase, "ms": ms, "share": ms / cycle if cycle else 0.0}
        for phase, ms in means.items()
    ]


def render_report(runs: Sequence[RunRecord], generated_at: datetime | None = None) -> str:
    """Render the report for these runs (oldest first)."""
    by_scenario: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_scenario.setdefault(run.measurement.scenario, []).append(run)
    scenarios = [
        {
            "name": name,
            "runs": scenario_runs,
            "latest": scenario_runs[-1],
            "chart": tok_s_chart(scenario_runs),
            "phases": phase_rows(scenario_runs[-1]),
        }
        for name, scenario_runs in sorted(by_scenario.items())
    ]
    return _ENV.get_template("report.html.j2").render(
        scenarios=scenarios,
        generated_at=(generated_at or datetime.now(UTC)).isoformat(timespec="seconds"),
        median=_median,
        metrics=metrics.METRICS,
    )


def write_report(path: Path, runs: Sequence[RunRecord]) -> Path:
    """Render and write the report atomically; return its path."""
    html = render_report(runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(html)
    os.replace(tmp, path)
    return path
