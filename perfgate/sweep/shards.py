"""A sweep shared by several runners: which points each shard measures, and the whole again.

Assignment: the grid's points are numbered in the order a sweep measures them (environment
points in the matrix's order, then each one's branches, topk then draft tokens, each with
its steps ascending: perfgate.sweep.grid), from 0; shard ``I`` of ``N`` (1-based) measures
the points whose number ``k`` has ``k % N == I - 1``. Round robin spreads the costly large
steps over every shard; the same grid always gives the same assignment, whatever machine a
shard lands on.

A batch is one sweep measured by its shards: each shard records every point it measures
(as it is measured, in its own transaction) with a ``sweep_run`` entry naming the batch,
the shard, the point's number and the grid. Collecting a batch reads those runs back
(:func:`collect`): each point's newest run, the points no run holds (a shard that died,
ran out of budget or is still running), and which points may be compared at all. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.errors import ConfigError
from perfgate.results import RunRecord
from perfgate.sweep.grid import Point, SweepSpec, grid

SWEEP_RUN = "sweep_run"  # the recorded config's entry that places a point in its batch
MAX_SHARDS = 1000

# Fingerprint fields a sweep's points may differ in by design: the scenario digest holds
# steps, topk and draft tokens. The sweep's environment axes (env.NAME) are added per grid.
SWEPT_FIELDS = frozenset({"scenario"})


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int = 1
    count: int = 1

    def holds(self, number: int) -> bool:
        """Whether point `number` (0-based, in the grid's order) is this shard's."""
        return number % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """Parse ``--shard I/N``."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if found:
        index, count = int(found.group(1)), int(found.group(2))
        if 1 <= index <= count <= MAX_SHARDS:
            return Shard(index, count)
    raise ConfigError(
        f"{text!r} is not a shard I/N with 1 <= I <= N <= {MAX_SHARDS}",
        field="--shard",
        fix="write e.g. --shard 2/4 (the second of four shards)",
    )


def numbered_points(spec: SweepSpec) -> list[Point]:
    """Every point of the grid, in the order that numbers them."""
    return [point for _, branches in grid(spec) for branch in branches for point in branch]


def grid_json(spec: SweepSpec) -> dict[str, Any]:
    """The grid as recorded with each point (what every shard of a batch must share)."""
    return {
        "steps": list(spec.steps),
        "topk": list(spec.topk),
        "draft_tokens": list(spec.draft_tokens),
        "env": {k: list(v) for k, v in spec.env.items()},
        "repeats": spec.repeats,
    }


def spec_from_grid(name: str, scenario: str, recorded: Mapping[str, Any]) -> SweepSpec:
    """The SweepSpec a recorded grid describes."""
    return SweepSpec(
        name=name,
        scenario=scenario,
        steps=tuple(recorded["steps"]),
        topk=tuple(recorded["topk"]),
        draft_tokens=tuple(recorded["draft_tokens"]),
        env={k: tuple(v) for k, v in recorded["env"].items()},
        repeats=recorded.get("repeats"),
        early_stop=False,
    )


def run_entry(
    batch: str, shard: Shard, number: int, total: int, spec: SweepSpec, scenario: str
) -> dict[str, Any]:
    """The ``sweep_run`` entry of point `number`'s recorded config."""
    return {
        "batch": batch,
        "shard": shard.index,
        "shards": shard.count,
        "point": number,
        "points": total,
        "scenario": scenario,
        "grid": grid_json(spec),
    }


@dataclass(frozen=True)
class Collected:
    """One batch gathered from the history."""

    spec: SweepSpec
    batch: str
    shards: int
    points: tuple[tuple[Point, RunRecord | None], ...]  # in the grid's order
    groups: tuple[tuple[int, ...], ...] = ()  # numbers of the points that may be compared
    differences: tuple[str, ...] = ()  # why the groups may not be compared with each other
    scenario: str = ""  # the scenario the sweep varies

    def missing(self) -> list[tuple[int, Point]]:
        """The points no run of the batch holds, with their numbers."""
        return [(i, p) for i, (p, run) in enumerate(self.points) if run is None]

    def missing_lines(self) -> list[str]:
        """Per shard with missing points, which ones."""
        by_shard: dict[int, list[str]] = {}
        for number, point in self.missing():
            by_shard.setdefault(number % self.shards + 1, []).append(point.label())
        total = {s: sum(1 for i in range(len(self.points)) if i % self.shards + 1 == s)
                 for s in by_shard}  # fmt: skip
        return [
            f"shard {shard}/{self.shards} recorded {total[shard] - len(labels)} of its "
            f"{total[shard]} points; missing: {'; '.join(labels)}"
            for shard, labels in sorted(by_shard.items())
        ]


def batches(records: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """The records (oldest first) per batch, in the order their batches were first seen."""
    found: dict[str, list[RunRecord]] = {}
    for record in records:
        entry = record.measurement.config.get(SWEEP_RUN)
        if isinstance(entry, Mapping) and isinstance(entry.get("batch"), str):
            found.setdefault(entry["batch"], []).append(record)
    return found


def collect(name: str, batch: str, records: Sequence[RunRecord]) -> Collected:
    """Gather batch `batch` of sweep `name` from its runs (oldest first).

    Refuses a batch whose shards ran different grids or shard counts.
    """
    entries = [r.measurement.config[SWEEP_RUN] for r in records]
    shapes = {(repr(e["grid"]), e["shards"]) for e in entries}
    if len(shapes) != 1:
        raise ConfigError(
            f"the shards of batch {batch!r} of sweep {name!r} ran different grids or shard counts",
            field="--batch",
            fix="run every shard of a batch with the same flags; collect one batch at a time",
        )
    first = entries[0]
    spec = spec_from_grid(name, str(first.get("scenario", "")), first["grid"])
    numbered = numbered_points(spec)
    newest: dict[int, RunRecord] = {}
    for record, entry in zip(records, entries, strict=True):
        number = int(entry["point"])
        if 0 <= number < len(numbered):
            newest[number] = record  # oldest first: the last one is the newest
    points = tuple((point, newest.get(i)) for i, point in enumerate(numbered))
    groups, differences = comparable_groups(spec, newest)
    return Collected(
        spec,
        batch,
        int(first["shards"]),
        points,
        groups,
        differences,
        scenario=str(first.get("scenario", "")),
    )


def comparable_groups(
    spec: SweepSpec, runs: Mapping[int, RunRecord]
) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """Group the points whose fingerprints agree in everything the sweep does not vary.

    Points measured on machines that differ (a driver, torch, the GPUs) are not compared:
    their tok/s say as much about the machines as about the settings. Returns the groups
    (largest first) and, where there are several, the fields that part them.
    """
    varied = SWEPT_FIELDS | {f"env.{name}" for name in spec.env}
    keyed: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for number, record in sorted(runs.items()):
        fingerprint = record.measurement.fingerprint
        key = tuple(sorted((k, v) for k, v in fingerprint.items() if k not in varied))
        keyed.setdefault(key, []).append(number)
    groups = sorted(keyed.items(), key=lambda item: (-len(item[1]), item[1][0]))
    if len(groups) < 2:
        return tuple(tuple(g) for _, g in groups), ()
    base = dict(groups[0][0])
    differences = []
    for key, numbers in groups[1:]:
        other = dict(key)
        fields = sorted(f for f in set(base) | set(other) if base.get(f) != other.get(f))
        shown = ", ".join(f"{f} ({base.get(f)} vs {other.get(f)})" for f in fields)
        differences.append(
            f"points {_numbers(numbers)} differ from points {_numbers(groups[0][1])}: {shown}"
        )
    return tuple(tuple(g) for _, g in groups), tuple(differences)


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(str(n) for n in numbers)
