"""Is a slow launch a slow machine or a slow process? Read from histories already recorded.

    python benchmarks/host_phase_pairs.py HISTORY.db [HISTORY.db ...] [--out FILE.md]

A `perfgate run` starts two server processes, the plain twin and the speculative server,
one after the other (about 30 s apart on an H200). Their host-bound phases (prefill, and the
spec server's accept: host work around the cycle's one sync) show how fast the host side of
each process ran; verify, the GPU's own work, does not move with it. Per history and scenario,
over its runs without an injected slowdown (the fingerprint's ``injected_slowdown``):

- within a process: how the spec server's accept and prefill move together across runs
  (Pearson's r); near +1 says one state slows a process's host work throughout;
- across the two processes of one run: how the spec server's phases move with the plain
  twin's prefill; near +1 says the state is the machine's, lasting over both servers of a
  run; near 0 (with the spec server's phases still scattering) says it is drawn anew with
  each process.

Writes the table (markdown) to stdout, and to ``--out`` where given. Exit 0; 64 on a file
that is not a perfgate history.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from recorded_history import connect, tables_main

PAIRS = (
    ("spec accept", "spec prefill"),
    ("spec accept", "plain prefill"),
    ("spec prefill", "plain prefill"),
)


def run_phases(db: Path) -> dict[str, list[dict[str, float]]]:
    """Per scenario, per run without an injected slowdown: the median over repeats of each
    phase's mean ms, for the spec server's accept and prefill and the plain twin's prefill."""
    with connect(db) as connection:
        runs = connection.execute(
            "SELECT id, scenario FROM runs "
            "WHERE json_extract(fingerprint, '$.injected_slowdown') IS NULL ORDER BY id"
        ).fetchall()
        found: dict[str, list[dict[str, float]]] = {}
        for run, scenario in runs:
            row = {}
            for mode, phase in (("spec", "accept"), ("spec", "prefill"), ("plain", "prefill")):
                values = [
                    ms
                    for (ms,) in connection.execute(
                        "SELECT mean_ms FROM phases WHERE run_id = ? AND mode = ? AND phase = ?",
                        (run, mode, phase),
                    )
                ]
                if values:
                    row[f"{mode} {phase}"] = statistics.median(values)
            if len(row) == 3:
                found.setdefault(scenario, []).append(row)
    return found


def correlation(rows: list[dict[str, float]], a: str, b: str) -> str:
    xs, ys = [r[a] for r in rows], [r[b] for r in rows]
    if len(rows) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return "-"
    return f"{statistics.correlation(xs, ys):+.2f}"


def spread(values: list[float]) -> str:
    return f"{min(values):.3g}-{max(values):.3g}"


def table(histories: list[Path]) -> str:
    lines = [
        "| history | runs | spec accept ms | spec prefill ms | plain prefill ms | "
        + " | ".join(f"r({a}, {b})" for a, b in PAIRS)
        + " |",
        "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in PAIRS) + " |",
    ]
    for db in histories:
        by_scenario = run_phases(db)
        if not by_scenario:
            lines.append(f"| {db} | 0 | - | - | - | " + " | ".join("-" for _ in PAIRS) + " |")
        for scenario, rows in by_scenario.items():
            keys = ("spec accept", "spec prefill", "plain prefill")
            ranges = [spread([r[k] for r in rows]) for k in keys]
            lines.append(
                f"| {db}, {scenario} | {len(rows)} | {' | '.join(ranges)} | "
                + " | ".join(correlation(rows, a, b) for a, b in PAIRS)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    columns = {"runs": "id, fingerprint", "phases": "run_id, mode, phase, mean_ms"}
    return tables_main(argv, __doc__.split("\n")[0], columns, table)


if __name__ == "__main__":
    sys.exit(main())
