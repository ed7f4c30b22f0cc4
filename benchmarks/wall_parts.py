"""Which part of a repeat's time scatters between launches? Read from a recorded history.

    python benchmarks/wall_parts.py HISTORY.db [HISTORY.db ...] [--out FILE.md]

A repeat's output_tok_s is its output tokens over its wall time, and that wall time is the
batch's prefill, then its decode cycles, then whatever the server and the client add. The
probe times the prefill (its ``prefill`` phase, ms per prefill, ``cycles`` prefills in the
repeat), so each repeat's wall splits into the prefill and the rest:

    wall_ms = tokens / output_tok_s * 1000      tokens: the run's recorded output ids
    rest_ms = wall_ms - prefills * prefill_ms

Per history, scenario and server (spec, plain), over the runs without an injected slowdown
(the fingerprint's ``injected_slowdown``): each run's median over its repeats of wall, prefill
and rest; their spread between launches as a share of the mean wall (the standard deviation
over the runs' medians, divided by the mean wall), so the three add up as variances do where
the parts move apart; the median spread within a run; and Pearson's r between the runs'
prefill and wall. Where the prefill's share is near the wall's and r near +1, the launches
differ in their prefill, and the decode cycles and the rest hold still.

Writes the table (markdown) to stdout, and to ``--out`` where given. Exit 0; 64 on a file
that is not a perfgate history.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
from pathlib import Path

from recorded_history import connect, tables_main

PARTS = ("wall", "prefill", "rest")


def repeats(connection: sqlite3.Connection, run: int, mode: str) -> list[dict[str, float]]:
    """Each repeat's wall, prefill and rest ms of one server of one run, and the run's output
    tokens (every repeat makes the same)."""
    ids = "spec_ids" if mode == "spec" else "plain_ids"
    (tokens,) = connection.execute(
        f"SELECT SUM(json_array_length({ids})) FROM outputs WHERE run_id = ?", (run,)
    ).fetchone()
    prefill = {
        repeat: cycles * mean_ms
        for repeat, cycles, mean_ms in connection.execute(
            "SELECT repeat, cycles, mean_ms FROM phases "
            "WHERE run_id = ? AND mode = ? AND phase = 'prefill'",
            (run, mode),
        )
    }
    rows = []
    for repeat, tok_s in connection.execute(
        "SELECT repeat, value FROM samples WHERE run_id = ? AND mode = ? "
        "AND metric = 'output_tok_s' ORDER BY repeat",
        (run, mode),
    ):
        if tokens and tok_s > 0 and repeat in prefill:
            wall = tokens / tok_s * 1e3
            rest = wall - prefill[repeat]
            rows.append({"wall": wall, "prefill": prefill[repeat], "rest": rest, "tokens": tokens})
    return rows


def launches(db: Path) -> dict[tuple[str, str], list[list[dict[str, float]]]]:
    """Per (scenario, server), each unchanged run's repeats."""
    found: dict[tuple[str, str], list[list[dict[str, float]]]] = {}
    with connect(db) as connection:
        runs = connection.execute(
            "SELECT id, scenario FROM runs "
            "WHERE json_extract(fingerprint, '$.injected_slowdown') IS NULL ORDER BY id"
        ).fetchall()
        for run, scenario in runs:
            for mode in ("spec", "plain"):
                rows = repeats(connection, run, mode)
                if rows:
                    found.setdefault((scenario, mode), []).append(rows)
    return found


def _share(values: list[float], scale: float) -> float:
    return statistics.stdev(values) / scale if len(values) > 1 else 0.0


def row(name: str, runs: list[list[dict[str, float]]]) -> str:
    medians = {part: [statistics.median(r[part] for r in reps) for reps in runs] for part in PARTS}
    wall = statistics.fmean(medians["wall"])
    between = [f"{_share(medians[part], wall):.2%}" for part in PARTS]
    within = statistics.median(_share([r["wall"] for r in reps], wall) for reps in runs)
    walls, prefills = medians["wall"], medians["prefill"]
    together = "-"
    if len(runs) >= 3 and len(set(walls)) > 1 and len(set(prefills)) > 1:
        together = f"{statistics.correlation(prefills, walls):+.2f}"
    return (
        f"| {name} | {len(runs)} | {wall:.1f} | {statistics.fmean(prefills):.1f} "
        f"({min(prefills):.1f}-{max(prefills):.1f}) | {' | '.join(between)} | {within:.2%} "
        f"| {together} |"
    )


def table(histories: list[Path]) -> str:
    lines = [
        "| history, scenario, server | runs | wall ms | prefill ms (range) | wall between "
        "launches | prefill's part | the rest's part | wall within a run | r(prefill, wall) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for db in histories:
        for (scenario, mode), runs in launches(db).items():
            lines.append(row(f"{db}, {scenario}, {mode}", runs))
    return "\n".join(lines) + "\n"


COLUMNS = {
    "runs": "id, fingerprint",
    "phases": "run_id, mode, phase, repeat, cycles, mean_ms",
    "samples": "run_id, mode, metric, repeat, value",
    "outputs": "run_id, spec_ids, plain_ids",
}


def main(argv: list[str] | None = None) -> int:
    return tables_main(argv, __doc__.split("\n")[0], COLUMNS, table)


if __name__ == "__main__":
    sys.exit(main())
