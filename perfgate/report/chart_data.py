"""The report's data: the history's columns turned into compact, chart-ready arrays.

Everything the page's script draws is built here as plain JSON-ready values, column by
column (one array per metric, not one object per run), so 10,000 runs stay a few MB.
Groups are (scenario, runner profile) pairs: runs of one scenario on different hardware are
never drawn on one line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from perfgate import metrics
from perfgate.gate.verdict import Status, Verdict
from perfgate.report.bisects import Bisect, find_bisects
from perfgate.report.changepoints import ChangePoint, detect_change_points
from perfgate.report.links import safe_url
from perfgate.report.plans import Plan, find_plans
from perfgate.report.sweeps import Sweep, SweepRun, find_sweeps
from perfgate.store.columns import HistoryColumns, RunFacts

# The report's statuses, in the order the page's script indexes them.
STATUSES = ("pass", "regression", "improvement", "inconclusive", "incomparable", "error")
# Change points: stricter than Otava's p < 0.001, whose false alarms on long noisy series
# show as clutter (see benchmarks/report_changepoints.py for the measured rates).
CHANGE_MAX_P = 1e-4
SIGNIFICANT_DIGITS = 4  # of every charted value: 0.1% steps, far below run-to-run noise
STACKED = (*metrics.NAMED_PHASES, metrics.CYCLE)  # `other` is cycle minus the named phases


@dataclass(frozen=True)
class Group:
    """The runs of one scenario on one runner profile, oldest first."""

    scenario: str
    profile: str
    runs: tuple[RunFacts, ...]


def group_runs(columns: HistoryColumns) -> list[Group]:
    """Split the history's runs by (scenario, profile), each group oldest first."""
    found: dict[tuple[str, str], list[RunFacts]] = {}
    for run in columns.runs:
        found.setdefault((run.scenario, run.profile), []).append(run)
    return [Group(s, p, tuple(runs)) for (s, p), runs in sorted(found.items())]


def build_payload(
    columns: HistoryColumns,
    groups: Sequence[Group],
    sweeps: Sequence[Sweep],
    repository: str | None,
) -> dict[str, Any]:
    """The JSON the page draws from: runs as columns, then per group its series and marks."""
    runs = columns.runs
    position = {run.id: i for i, run in enumerate(runs)}
    branches = sorted({run.branch or "" for run in runs})
    return {
        "repository": repository,
        "statuses": list(STATUSES),
        "branches": branches,
        "runs": _run_columns(runs, branches, repository),
        "groups": [_group_payload(columns, group, position) for group in groups],
        "sweeps": [_sweep_payload(s) for s in sweeps],
    }


def _run_columns(
    runs: Sequence[RunFacts], branches: list[str], repository: str | None
) -> dict[str, Any]:
    t0 = runs[0].started_at.timestamp() if runs else 0.0
    branch_index = {name: i for i, name in enumerate(branches)}
    status_index = {name: i for i, name in enumerate(STATUSES)}
    prefix = f"{repository}/actions/runs/" if repository else None
    return {
        "t0": t0,
        "id": [run.id for run in runs],
        "t": [round(run.started_at.timestamp() - t0) for run in runs],
        "branch": [branch_index[run.branch or ""] for run in runs],
        "status": [status_index.get(run.status, STATUSES.index("error")) for run in runs],
        # 12 hex digits name a commit (and link to it: the forge resolves a short id).
        "commit": [(run.commit or "")[:12] or None for run in runs],
        "pr": [run.pr for run in runs],
        "ci": [_short_ci(run.ci_url, prefix) for run in runs],
        "ciPrefix": prefix,
        "reused": [run.plain_reused_from for run in runs],
        "dirty": [int(run.dirty) for run in runs],
        "equivalent": [int(run.equivalent) for run in runs],
        # The runner time each run took, launches and compiles included (s).
        "seconds": [_seconds(run) for run in runs],
    }


def _seconds(run: RunFacts) -> int | None:
    if run.finished_at is None:
        return None
    return max(round((run.finished_at - run.started_at).total_seconds()), 0)


def _short_ci(url: str | None, prefix: str | None) -> str | None:
    """A safe CI URL, without the repository's run prefix when it has it (a few MB saved).

    The prefix is the checked repository URL's, so a URL that starts with it is safe too.
    """
    if url and prefix and url.startswith(prefix):
        return "~" + url[len(prefix) :]
    return safe_url(url)


def _group_payload(
    columns: HistoryColumns, group: Group, position: Mapping[int, int]
) -> dict[str, Any]:
    ids = [run.id for run in group.runs]
    series = {
        f"{mode}.{metric}": _column(by_run, ids)
        for (mode, metric), by_run in sorted(columns.values.items())
        if not by_run.keys().isdisjoint(ids)
    }
    phases = {phase: _column(columns.phase_ms.get(("spec", phase), {}), ids) for phase in STACKED}
    return {
        "scenario": group.scenario,
        "profile": group.profile,
        "runs": [position[i] for i in ids],
        "series": {key: rounded(values) for key, values in series.items()},
        "phases": {k: rounded(v) for k, v in phases.items() if not np.isnan(v).all()},
        "verdicts": _verdicts(columns, ids),
        "bands": _bands(columns, ids),
        "changes": {key: _changes(values) for key, values in series.items()},
        "fingerprints": fingerprint_changes(group.runs),
    }


def _column(by_run: Mapping[int, float], ids: Sequence[int]) -> NDArray[np.float64]:
    """The runs' values in the group's order, NaN where a run lacks the metric."""
    return np.fromiter((by_run.get(i, math.nan) for i in ids), dtype=np.float64, count=len(ids))


def _verdicts(columns: HistoryColumns, ids: list[int]) -> dict[str, list[int]]:
    """Per judged metric, each run's verdict status (an index into STATUSES; -1: none)."""
    index = {name: i for i, name in enumerate(STATUSES)}
    result = {}
    for metric, by_run in sorted(columns.verdicts.items()):
        statuses = [index.get(by_run[i].status, -1) if i in by_run else -1 for i in ids]
        if any(s >= 0 for s in statuses):
            result[metric] = statuses
    return result


def _bands(columns: HistoryColumns, ids: list[int]) -> dict[str, list[list[Any]]]:
    """Per judged metric, the band each run was judged against: baseline x (1 -/+ tolerance).

    Run-length encoded as [first position, low, high] at each change (the band moves only
    when a baseline is approved); low and high are null where no band applied.
    """
    result = {}
    for metric, by_run in sorted(columns.verdicts.items()):
        steps: list[list[Any]] = []
        last: tuple[float | None, float | None] | None = None
        for pos, run_id in enumerate(ids):
            verdict = by_run.get(run_id)
            band = (verdict.baseline, verdict.tolerance) if verdict else (None, None)
            if band == last:
                continue
            last = band
            base, tolerance = band
            if base is None or tolerance is None:
                steps.append([pos, None, None])
            else:
                steps.append(
                    [pos, *rounded(np.array([base * (1 - tolerance), base * (1 + tolerance)]))]
                )
        if any(step[1] is not None for step in steps):
            result[metric] = steps
    return result


def _changes(values: NDArray[np.float64]) -> list[list[Any]]:
    """Change points of a series with gaps: [position, before, after, p-value] each."""
    present = np.flatnonzero(~np.isnan(values))
    if len(present) < 4:
        return []
    found: list[ChangePoint] = detect_change_points(values[present], max_p=CHANGE_MAX_P)
    return [
        [int(present[c.index]), *rounded(np.array([c.before, c.after])), float(f"{c.p_value:.2g}")]
        for c in found
    ]


def fingerprint_changes(runs: Sequence[RunFacts]) -> list[list[Any]]:
    """Where a group's environment fingerprint changed: [position, "field: old → new; ..."]."""
    changes: list[list[Any]] = []
    for pos in range(1, len(runs)):
        before, after = runs[pos - 1].fingerprint, runs[pos].fingerprint
        if before != after:
            changes.append([pos, describe_fingerprint_change(before, after)])
    return changes


def describe_fingerprint_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """One line naming each field that differs: "torch: 2.4.0 → 2.5.1; driver: (none) → 550"."""
    fields = sorted(set(before) | set(after))
    return "; ".join(
        f"{f}: {before.get(f, '(none)')} → {after.get(f, '(none)')}"
        for f in fields
        if before.get(f) != after.get(f)
    )


def sweeps_of(columns: HistoryColumns) -> list[Sweep]:
    """The sweeps the history holds (see perfgate.report.sweeps for the rule)."""
    return find_sweeps(_sweep_runs(columns))


def plans_of(columns: HistoryColumns) -> list[Plan]:
    """The plans the history holds, against what was measured (perfgate.report.plans)."""
    return find_plans(_sweep_runs(columns))


def _sweep_runs(columns: HistoryColumns) -> list[SweepRun]:
    def value(mode: str, metric: str, run_id: int) -> float | None:
        return columns.values.get((mode, metric), {}).get(run_id)

    return [
        SweepRun(
            run.id,
            run.scenario,
            run.profile,
            run.config,
            value("spec", "output_tok_s", run.id),
            value("plain", "output_tok_s", run.id),
            value("spec", "accept_length", run.id),
        )
        for run in columns.runs
    ]


def bisects_of(columns: HistoryColumns) -> list[Bisect]:
    """The bisects the history holds (see perfgate.report.bisects)."""
    tok_s = columns.values.get(("spec", "output_tok_s"), {})
    verdicts: dict[int, list[Verdict]] = {}
    for metric, by_run in columns.verdicts.items():
        for run_id, facts in by_run.items():
            verdict = Verdict(metric, Status(facts.status), "", change=facts.change)
            verdicts.setdefault(run_id, []).append(verdict)
    return find_bisects(
        columns.runs,
        tok_s.get,
        lambda run_id: verdicts.get(run_id, []),
        columns.bisect_steps,
    )


def _sweep_payload(sweep: Sweep) -> dict[str, Any]:
    return {
        "name": sweep.name,
        "profile": sweep.profile,
        "steps": [p.steps for p in sweep.points],
        "topk": [p.topk for p in sweep.points],
        "draftTokens": [p.draft_tokens for p in sweep.points],
        "spec": rounded(_floats(p.run.spec_tok_s for p in sweep.points)),
        "plain": rounded(_floats(p.run.plain_tok_s for p in sweep.points)),
        "accept": rounded(_floats(p.run.accept_length for p in sweep.points)),
        "run": [p.run.run_id for p in sweep.points],
    }


def rounded(values: NDArray[np.float64]) -> list[float | None]:
    """Values to SIGNIFICANT_DIGITS digits, as short JSON numbers; None for NaN or infinity.

    Rounded by dividing by an exact power of ten (or multiplying, for large values), so each
    result is the double nearest a short decimal and prints as one ("123.4", not
    "123.40000000000001").
    """
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values) & (values != 0)
    magnitude = np.floor(np.log10(np.abs(values), where=finite, out=np.zeros_like(values)))
    digits = np.where(finite, SIGNIFICANT_DIGITS - 1 - magnitude, 0.0)
    up, down = 10.0 ** np.maximum(digits, 0), 10.0 ** np.maximum(-digits, 0)
    result = np.where(digits >= 0, np.round(values * up) / up, np.round(values / down) * down)
    return [None if math.isnan(v) or math.isinf(v) else v for v in result.tolist()]


def _floats(values: Iterable[float | None]) -> NDArray[np.float64]:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)
