"""Plans: what `perfgate plan` predicted, beside what was measured at the same settings. Pure.

A plan's profiled run holds its prediction in its config (``plan``, role ``profiled``). The
measured figure of a step count is, newest first: the plan's own run at that count (the
profiled one, or a confirmation, whose recorded error is the plan's own word), else the newest
run on the same runner profile whose config is the profiled run's but for the chain's steps
(and draft tokens, ``steps + 1``) and the entries a sweep or a plan adds (a sweep point's
place in its batch among them): a sweep's point or another plan's. Each profiled run's newest
version per plan name and profile is shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.report.sweeps import SWEPT, SweepRun

# Entries a sweep or a plan adds to a run's config: its name, the plan's, and a sweep point's
# place in its batch (perfgate.sweep.shards.SWEEP_RUN).
ADDED = ("sweep", "plan", "sweep_run")


@dataclass(frozen=True)
class PlanRow:
    """One step count: predicted tok/s [value, low, high], and what was measured there."""

    steps: int
    predicted: tuple[float | None, float | None, float | None]
    measured: float | None = None
    run_id: int | None = None
    error: float | None = None  # predicted / measured - 1
    source: str = ""  # "profiled", "confirmed" or "measured"


@dataclass(frozen=True)
class Plan:
    """One profiled run's prediction, against the measured points."""

    name: str  # the plan's `sweep` entry
    profile: str
    run_id: int
    steps_run: int
    best: int | None
    rows: tuple[PlanRow, ...]


def find_plans(runs: Sequence[SweepRun]) -> list[Plan]:
    """Every plan the runs (oldest first) hold, each with its newest measured points."""
    newest: dict[tuple[str, str], SweepRun] = {}
    for run in runs:
        entry = run.config.get("plan")
        if (
            isinstance(entry, Mapping)
            and entry.get("role") == "profiled"
            and entry.get("predicted")
        ):
            newest[(run.profile, str(run.config.get("sweep", run.scenario)))] = run
    plans = [_plan(name, profiled, runs) for (_, name), profiled in newest.items()]
    return sorted(plans, key=lambda p: (p.profile, p.name))


def _plan(name: str, profiled: SweepRun, runs: Sequence[SweepRun]) -> Plan:
    entry = profiled.config["plan"]
    measured = _measured_by_steps(profiled, runs)
    rows = []
    for point in entry["predicted"]:
        steps = int(point["steps"])
        value, low, high = (point["output_tok_s"] + [None, None, None])[:3]
        rows.append(_row(steps, (value, low, high), measured.get(steps), profiled))
    best = entry.get("best")
    return Plan(name, profiled.profile, profiled.run_id, int(entry["steps"]), best, tuple(rows))


def _row(
    steps: int,
    predicted: tuple[float | None, float | None, float | None],
    run: SweepRun | None,
    profiled: SweepRun,
) -> PlanRow:
    if run is None or run.spec_tok_s is None:
        return PlanRow(steps, predicted)
    if run.run_id == profiled.run_id:
        source = "profiled"
    elif _confirms(run, profiled):
        source = "confirmed"
    else:
        source = "measured"
    error = (
        run.config["plan"].get("error", {}).get("output_tok_s") if source == "confirmed" else None
    )
    if error is None and predicted[0] is not None:
        error = predicted[0] / run.spec_tok_s - 1
    return PlanRow(steps, predicted, run.spec_tok_s, run.run_id, error, source)


def _confirms(run: SweepRun, profiled: SweepRun) -> bool:
    """Whether `run` is a confirmation of the plan `profiled` made."""
    entry = run.config.get("plan")
    return (
        isinstance(entry, Mapping)
        and entry.get("role") == "confirm"
        and entry.get("profiled_run") == profiled.run_id
    )


def _measured_by_steps(profiled: SweepRun, runs: Sequence[SweepRun]) -> dict[int, SweepRun]:
    """Per steps, the run that measured it (see the module doc); the plan's own first."""
    fixed = _fixed(profiled.config)
    found: dict[int, tuple[int, SweepRun]] = {}
    for run in runs:
        config = run.config
        if run.profile != profiled.profile or config.get("topk") != 1:
            continue
        steps = config.get("steps")
        if not isinstance(steps, int) or config.get("draft_tokens") != steps + 1:
            continue
        if _fixed(config) != fixed:
            continue
        rank = 1 if _belongs(run, profiled) else 0  # the plan's own outrank other runs
        if steps not in found or rank >= found[steps][0]:
            found[steps] = (rank, run)
    return {steps: run for steps, (_, run) in found.items()}


def _belongs(run: SweepRun, profiled: SweepRun) -> bool:
    return run.run_id == profiled.run_id or _confirms(run, profiled)


def _fixed(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in (*SWEPT, *ADDED)}
