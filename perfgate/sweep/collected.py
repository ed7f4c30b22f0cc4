"""A collected batch in words and JSON: the sweep's table, its best, what is missing. Pure.

The best point is named only among points that may be compared (perfgate.sweep.shards:
their fingerprints agree in all but what the sweep varies). When the batch's points part
into several such groups, each group's best is shown and none is named for the whole: the
exit code is 64, as a verdict against a baseline of another environment is. Points no shard
recorded are listed per shard, and make the exit code 69.
"""

from __future__ import annotations

from typing import Any

from perfgate.errors import ExitCode
from perfgate.sweep.render import best_line, render_markdown, sweep_json
from perfgate.sweep.results import PointResult, SweepResult, median_tok_s
from perfgate.sweep.shards import Collected


def result_of(collected: Collected, numbers: tuple[int, ...] | None = None) -> SweepResult:
    """The batch's measured points (those numbered `numbers`, if given) as a SweepResult."""
    points: list[PointResult] = []
    plain: dict[str, float] = {}
    for number, (point, record) in enumerate(collected.points):
        if record is None and numbers is None:
            shard = f"{number % collected.shards + 1}/{collected.shards}"
            why = f"missing: shard {shard} recorded no run of it"
            points.append(PointResult(point, collected.spec.name, skipped=why))
        if record is None or (numbers is not None and number not in numbers):
            continue
        label = str(record.measurement.config.get("sweep", collected.spec.name))
        points.append(PointResult(point, label, record.id, record.measurement))
        plain.setdefault(label, median_tok_s(record.measurement.plain))
    return SweepResult(collected.spec, collected.scenario, tuple(points), plain)


def render_collected(collected: Collected) -> tuple[str, dict[str, Any], ExitCode]:
    """The markdown, the JSON and the exit code of a collected batch."""
    whole = result_of(collected)
    measured = sum(1 for p in whole.points if p.measured)
    head = (
        f"Batch {collected.batch} of sweep {collected.spec.name}: {measured} of "
        f"{len(collected.points)} points recorded by {collected.shards} shard"
        f"{'s' if collected.shards > 1 else ''}."
    )
    markdown = render_markdown(whole)
    lines = [head, ""]
    missing = collected.missing_lines()
    lines += [f"Missing: {line}." for line in missing]
    document = sweep_json(whole)
    document |= {
        "batch": collected.batch,
        "shards": collected.shards,
        "missing": [p.label() for _, p in collected.missing()],
        "incomparable": list(collected.differences),
    }
    code = whole.exit_code() if measured else ExitCode.INCONCLUSIVE
    if collected.differences:
        markdown = markdown.replace(best_line(whole), _not_compared(collected))
        document["best"] = document["fastest"] = None
        code = ExitCode.BAD_INPUT
    if missing:
        code = ExitCode.INFRASTRUCTURE
    document["exit_code"] = int(code)
    return "\n".join(lines) + "\n" + markdown, document, code


def _not_compared(collected: Collected) -> str:
    lines = [
        "Best: none across the batch: its points were measured on machines that differ, and "
        "are compared only within a group of one fingerprint."
    ]
    lines += [f"Not compared: {difference}." for difference in collected.differences]
    for index, numbers in enumerate(collected.groups, 1):
        group = result_of(collected, numbers)
        lines.append(f"Group {index} ({len(numbers)} points): {best_line(group)}")
    return "\n".join(lines)
