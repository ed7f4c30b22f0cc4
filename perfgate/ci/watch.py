"""The nightly watch of a branch: steps in a gated metric's trend, as issues to open or close.

Each watched series is one gated metric of one scenario on one runner profile, over the
branch's trend runs (the runs recorded on it outside pull requests: pushes and the nightly
schedule), each run's central value as the report charts it. The report's change-point
detection (perfgate.report.changepoints, at the report's level) finds where the series
stepped. The rule:

* the *standing step* is the newest change point that made the metric worse by more than
  its tolerance (a fall in tok/s, a rise in verify ms), when the current level, that of the
  last segment, is still worse than the level before that step by more than the tolerance;
* a standing step opens the series' issue, or updates it (the figures grow sharper as runs
  accumulate); none closes it: the step went back (or a later step undid it).

A series of fewer than ``MIN_RUNS`` runs is not watched (its issue, if any, is left as it
is). The issue says the change, the commit range of the step (the last run before it and the
first after it), the phase of the decode cycle that moved most, and the `perfgate bisect`
command that finds the commit; or, where the two runs share a commit, that the environment
moved, with the fingerprint fields that changed.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfgate import metrics
from perfgate.ci.issues import WatchKey, marker
from perfgate.metrics import Direction
from perfgate.report.changepoints import ChangePoint, detect_change_points
from perfgate.report.chart_data import CHANGE_MAX_P, STACKED, describe_fingerprint_change
from perfgate.store.columns import HistoryColumns, RunFacts

MIN_RUNS = 6  # two segments of the detector's minimum size (3 runs each)


@dataclass(frozen=True)
class Series:
    """One gated metric of one scenario on one profile, over the branch's trend runs."""

    key: WatchKey
    tolerance: float
    runs: tuple[RunFacts, ...]  # oldest first, each with a value
    values: tuple[float, ...]
    phases: Mapping[str, tuple[float, ...]]  # phase -> ms per cycle per run (NaN: none)


@dataclass(frozen=True)
class Step:
    """A standing step of a series: where it came, how far, what moved."""

    series: Series
    point: ChangePoint
    current: float  # the last segment's level

    @property
    def before(self) -> RunFacts:
        return self.series.runs[self.point.index - 1]

    @property
    def after(self) -> RunFacts:
        return self.series.runs[self.point.index]

    @property
    def change(self) -> float:
        return self.current / self.point.before - 1.0 if self.point.before else math.nan


def trend_series(
    columns: HistoryColumns,
    scenario: str,
    profile: str,
    tolerances: Mapping[str, float],
) -> list[Series]:
    """The series of each gated metric (`tolerances`' keys) of one scenario on one profile,
    over the runs `columns` holds that belong to no pull request."""
    runs = [r for r in columns.runs if r.scenario == scenario and r.profile == profile]
    runs = [r for r in runs if r.pr is None]
    found = []
    for metric, tolerance in tolerances.items():
        by_run = columns.values.get(("spec", metric), {})
        kept = tuple(r for r in runs if math.isfinite(by_run.get(r.id, math.nan)))
        phases = {
            phase: tuple(
                columns.phase_ms.get(("spec", phase), {}).get(r.id, math.nan) for r in kept
            )
            for phase in STACKED
        }
        found.append(
            Series(
                WatchKey(scenario, profile, metric),
                tolerance,
                kept,
                tuple(by_run[r.id] for r in kept),
                phases,
            )
        )
    return found


def standing_step(series: Series) -> Step | None:
    """The series' standing step (see the module doc), or None."""
    points = detect_change_points(np.array(series.values), max_p=CHANGE_MAX_P)
    direction = metrics.METRICS[series.key.metric].direction
    worse = [p for p in points if _worse(p.before, p.after, direction, series.tolerance)]
    if not worse:
        return None
    step = worse[-1]
    current = points[-1].after
    if not _worse(step.before, current, direction, series.tolerance):
        return None  # it went back
    return Step(series, step, current)


def _worse(before: float, after: float, direction: Direction, tolerance: float) -> bool:
    if direction is Direction.HIGHER_IS_BETTER:
        return after < before * (1.0 - tolerance)
    return after > before * (1.0 + tolerance)


def moved_phases(step: Step) -> list[tuple[str, float, float]]:
    """Each phase's mean ms per cycle on either side of the step, the largest move first."""
    series, index = step.series, step.point.index
    rows = []
    for phase, values in series.phases.items():
        if phase == metrics.CYCLE:
            continue
        before = _mean(values[_segment_start(step) : index])
        after = _mean(values[index:])
        if math.isfinite(before) and math.isfinite(after):
            rows.append((phase, before, after))
    return sorted(rows, key=lambda row: -abs(row[2] - row[1]))


def _segment_start(step: Step) -> int:
    """Where the level before the step began: the change point before it, or the start."""
    earlier = [
        p.index
        for p in detect_change_points(np.array(step.series.values), max_p=CHANGE_MAX_P)
        if p.index < step.point.index
    ]
    return earlier[-1] if earlier else 0


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def issue_title(step: Step) -> str:
    key = step.series.key
    verb = "fell" if step.change < 0 else "rose"
    return (
        f"perfgate: {key.metric} of {key.scenario} on {key.profile} {verb} "
        f"{abs(step.change):.1%} at {(step.after.commit or '?')[:10]}"
    )


def issue_body(step: Step, branch: str, repository: str | None) -> str:
    """The issue's markdown: the change, the commit range, the phase, the bisect command."""
    key, point = step.series.key, step.point
    unit = metrics.METRICS[key.metric].unit
    direction = metrics.METRICS[key.metric].direction.value
    before, after = step.before, step.after
    since = len(step.series.runs) - point.index
    lines = [
        marker(key),
        f"## {key.metric} of `{key.scenario}` on `{key.profile}`: {step.change:+.1%}",
        "",
        f"The trend runs of `{branch}` show a step in {key.metric} ({direction} is better): "
        f"from {point.before:.4g} to {step.current:.4g} {unit} ({step.change:+.1%}; the "
        f"tolerance is {step.series.tolerance:.0%}), first seen in run #{after.id} of "
        f"{after.started_at:%Y-%m-%d %H:%M} UTC (change point p = {point.p_value:.2g}; "
        f"{since} run{'s' if since != 1 else ''} at the new level).",
        "",
        "| | run | commit | when (UTC) |",
        "| --- | --- | --- | --- |",
        f"| last run before the step | #{before.id} | {_commit(before, repository)} | "
        f"{before.started_at:%Y-%m-%d %H:%M} |",
        f"| first run after it | #{after.id} | {_commit(after, repository)} | "
        f"{after.started_at:%Y-%m-%d %H:%M} |",
        "",
    ]
    lines += _phase_lines(step)
    lines += _cause_lines(step, repository)
    lines += [
        "",
        "The nightly watch updates this issue while the step stands and closes it when the "
        "level comes back within the tolerance (`perfgate ci watch`, docs/github-actions.md).",
    ]
    return "\n".join(lines) + "\n"


def _phase_lines(step: Step) -> list[str]:
    rows = moved_phases(step)
    if not rows:
        return ["No phase timings on either side of the step.", ""]
    phase, before, after = rows[0]
    lines = [
        f"The phase that moved most: **{phase}**, {before:.3f} -> {after:.3f} ms per cycle "
        f"({after - before:+.3f} ms).",
        "",
        "| phase | ms/cycle before | after | delta |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {p} | {b:.3f} | {a:.3f} | {a - b:+.3f} |" for p, b, a in rows]
    return [*lines, ""]


def _cause_lines(step: Step, repository: str | None) -> list[str]:
    good, bad = step.before.commit, step.after.commit
    changed = describe_fingerprint_change(step.before.fingerprint, step.after.fingerprint)
    lines = []
    if changed:
        lines += [f"The environment changed between the two runs: {changed}.", ""]
    if not good or not bad:
        return [*lines, "The runs record no commit: nothing to bisect."]
    if good == bad:
        return [*lines, "Both runs measured the same commit: the environment moved, not the code."]
    compare = f" ({repository}/compare/{good}...{bad})" if repository else ""
    command = shlex.join(
        ["perfgate", "bisect", "--scenario", step.series.key.scenario,
         "--good", good[:12], "--bad", bad[:12]]
    )  # fmt: skip
    return [
        *lines,
        f"The commits {good[:10]}..{bad[:10]}{compare} hold the change. To find the one, on a "
        f"runner of profile `{step.series.key.profile}`:",
        "",
        "```sh",
        command,
        "```",
    ]


def _commit(run: RunFacts, repository: str | None) -> str:
    if not run.commit:
        return "–"
    shown = f"`{run.commit[:10]}`"
    return f"[{shown}]({repository}/commit/{run.commit})" if repository else shown


def back_comment(series: Series) -> str:
    """The comment that closes an issue whose step went back."""
    last = series.runs[-1]
    key = series.key
    return (
        f"The step went back: {key.metric} of `{key.scenario}` on `{key.profile}` holds no "
        f"standing step worse than the {series.tolerance:.0%} tolerance as of run #{last.id} "
        f"(commit `{(last.commit or '?')[:10]}`, {series.values[-1]:.4g} "
        f"{metrics.METRICS[key.metric].unit}). Closed by the nightly watch.\n"
    )


def watch_plan(
    series: Sequence[Series], branch: str, repository: str | None, label: str
) -> dict[str, Any]:
    """What the issues should be: per watched series, its open step's issue or its closing."""
    watched, opened = [], []
    for one in series:
        if len(one.values) < MIN_RUNS:
            continue
        step = standing_step(one)
        entry: dict[str, Any] = {"key": one.key.to_json()}
        if step is None:
            entry["close_comment"] = back_comment(one)
        else:
            entry["issue"] = {
                "title": issue_title(step),
                "body": issue_body(step, branch, repository),
            }
            opened.append(one.key)
        watched.append(entry)
    return {"schema": 1, "label": label, "branch": branch, "watched": watched}
