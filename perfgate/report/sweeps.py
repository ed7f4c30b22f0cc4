"""Sweeps: runs of one setup at several speculative settings (steps, topk, draft tokens). Pure.

The rule: two runs on the same runner profile belong to one sweep when their scenario
configs are equal except for ``steps``, ``topk`` and ``draft_tokens``; or, when a config
holds a ``sweep`` entry (a sweep command may name its sweep), when they share that name.
A group is a sweep when it holds at least two settings. Each setting's point is its newest
run (the history's latest word on that setting); the number of runs behind it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SWEPT = ("steps", "topk", "draft_tokens")


@dataclass(frozen=True)
class SweepRun:
    """What a sweep needs of one run."""

    run_id: int
    scenario: str
    profile: str
    config: Mapping[str, Any]
    spec_tok_s: float | None
    plain_tok_s: float | None
    accept_length: float | None


@dataclass(frozen=True)
class SweepPoint:
    """One setting of a sweep, from its newest run."""

    steps: Any
    topk: Any
    draft_tokens: Any
    run: SweepRun
    runs: int  # runs recorded at this setting

    @property
    def speedup(self) -> float | None:
        spec, plain = self.run.spec_tok_s, self.run.plain_tok_s
        return spec / plain if spec is not None and plain else None


@dataclass(frozen=True)
class Sweep:
    """Settings of one setup, by steps then topk then draft tokens."""

    name: str  # the `sweep` entry, or the scenarios involved
    profile: str
    points: tuple[SweepPoint, ...]


def sweep_key(profile: str, config: Mapping[str, Any]) -> str:
    """The group a run's config falls in: its profile and its config without the swept knobs."""
    if config.get("sweep") is not None:
        return json.dumps([profile, "sweep", str(config["sweep"])])
    fixed = {k: v for k, v in config.items() if k not in SWEPT}
    return json.dumps([profile, fixed], sort_keys=True, default=str)


def find_sweeps(runs: Sequence[SweepRun]) -> list[Sweep]:
    """Group runs (oldest first) into sweeps; setups run at a single setting are not sweeps."""
    groups: dict[str, dict[tuple[str, ...], list[SweepRun]]] = {}
    for run in runs:
        setting = tuple(repr(run.config.get(k)) for k in SWEPT)
        groups.setdefault(sweep_key(run.profile, run.config), {}).setdefault(setting, []).append(
            run
        )
    sweeps = []
    for settings in groups.values():
        if len(settings) < 2:
            continue
        points = [_point(members) for members in settings.values()]
        points.sort(key=lambda p: tuple(_order(v) for v in (p.steps, p.topk, p.draft_tokens)))
        sweeps.append(Sweep(_name(points), points[0].run.profile, tuple(points)))
    return sorted(sweeps, key=lambda s: (s.profile, s.name))


def _point(members: list[SweepRun]) -> SweepPoint:
    newest = members[-1]
    steps, topk, draft_tokens = (newest.config.get(k) for k in SWEPT)
    return SweepPoint(steps, topk, draft_tokens, run=newest, runs=len(members))


def _name(points: list[SweepPoint]) -> str:
    named = points[0].run.config.get("sweep")
    if named is not None:
        return str(named)
    return ", ".join(sorted({p.run.scenario for p in points}))


def _order(value: Any) -> tuple[int, float, str]:
    """Numbers in numeric order before anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))
