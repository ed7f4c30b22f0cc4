"""Between-launch and within-run spread of the gated metrics, from a history of fresh launches.

    for i in $(seq 10); do perfgate run --scenario S --no-gate --db sqlite:///H.db --report ''; done
    python benchmarks/launch_noise.py H.db S [--after RUN_ID] [--out FILE.md]

Per metric of ``METRICS`` (the gated ones, decode_tok_s among them, and the phases of the
cycle; as the samples table stores them): each run's median over its repeats, then across runs
the mean of those medians, their coefficient of variation (the between-launch spread) and the
median over runs of each run's own coefficient of variation (the within-run spread). The ratio
of the two is the noise shape benchmarks/gate_quality.py simulates ("restarts > repeats" is a
ratio of 3). Then each launch's medians, a row a run.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from pathlib import Path

from recorded_history import emit

METRICS = (
    "output_tok_s",
    "verify_ms",
    "accept_length",
    "speedup",
    "decode_tok_s",
    "cycle_ms",
    "draft_ms",
    "draft_extend_ms",
)


def cv(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


Samples = dict[tuple[str, str], dict[int, list[float]]]  # (metric, mode) -> run -> repeats


def samples_of(
    db: Path, scenario: str, after: int = 0, unjudged: bool = False
) -> tuple[list[int], Samples]:
    """The scenario's runs of a later id than ``after`` (with ``unjudged``, only those recorded
    without verdicts: ``--no-gate`` launches) and their repeats of every metric of METRICS."""
    judged = " AND id NOT IN (SELECT run_id FROM verdicts)" if unjudged else ""
    with sqlite3.connect(db) as connection:
        runs = [
            r
            for (r,) in connection.execute(
                f"SELECT id FROM runs WHERE scenario = ? AND id > ?{judged}", (scenario, after)
            )
        ]
        rows = connection.execute(
            "SELECT run_id, mode, metric, value FROM samples WHERE run_id IN "
            f"({','.join('?' * len(runs))}) ORDER BY run_id, repeat",
            runs,
        ).fetchall()
    samples: Samples = {}
    for run_id, mode, metric, value in rows:
        if metric in METRICS:
            samples.setdefault((metric, mode), {}).setdefault(run_id, []).append(value)
    return runs, samples


def spreads(samples: Samples) -> dict[tuple[str, str], tuple[float, float, float]]:
    """Per (metric, mode): the mean of the run medians, their CV (between launches) and the
    median of the runs' own CVs (within a run)."""
    found = {}
    for key, per_run in sorted(samples.items()):
        medians = [statistics.median(v) for v in per_run.values()]
        within = statistics.median(cv(v) for v in per_run.values())
        found[key] = (statistics.fmean(medians), cv(medians), within)
    return found


def table(db: Path, scenario: str, after: int = 0) -> str:
    runs, samples = samples_of(db, scenario, after)
    lines = [
        f"{len(runs)} launch{'' if len(runs) == 1 else 'es'} of {scenario}; per run the median "
        "over its repeats.",
        "",
        "| metric | server | mean of run medians | between launches (CV) | within a run "
        "(median CV) | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for (metric, mode), (mean, between, within) in spreads(samples).items():
        ratio = f"{between / within:.1f}" if within else "-"
        lines.append(f"| {metric} | {mode} | {mean:.4g} | {between:.2%} | {within:.2%} | {ratio} |")
    return "\n".join([*lines, "", *launches(samples)]) + "\n"


def launches(samples: Samples) -> list[str]:
    """Each launch's medians, one row a run: a spread made of launches in two groups (a slow
    state some launches start in) shows here, where the CVs above only say how wide it is."""
    columns = sorted(samples)
    runs = sorted({run for per_run in samples.values() for run in per_run})
    lines = [
        "Each launch's medians:",
        "",
        "| run | " + " | ".join(f"{metric} ({mode})" for metric, mode in columns) + " |",
        "| ---: | " + " | ".join("---:" for _ in columns) + " |",
    ]
    for run in runs:
        cells = [
            f"{statistics.median(samples[column][run]):.4g}" if run in samples[column] else "-"
            for column in columns
        ]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path, help="the SQLite history the launches recorded into")
    parser.add_argument("scenario")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--after", type=int, default=0, help="only the runs of a later id")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"launch_noise: {args.db}: no such history file", file=sys.stderr)
        return 64
    return emit(table(args.db, args.scenario, args.after), args.out)


if __name__ == "__main__":
    sys.exit(main())
