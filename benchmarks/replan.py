"""Judge today's plan model on recorded plans: predict again from each profiled run's recorded
observation, beside what that plan predicted and what a sweep in the same history measured.

    python benchmarks/replan.py --db sqlite:///PATH/history.db
    python benchmarks/replan.py --db sqlite:///PATH/history.db --sweep embedded-large-gpu-sweep-1

A plan's profiled run keeps the observation its prediction came from (perfgate/plan/compare.py
``observation_json``: every repeat's timed cycles and each sequence's acceptance depths), so a
change to perfgate/plan/forecast.py can be measured against a GPU plan on record without a
GPU. Per profiled run and step count: the tok/s its plan predicted, the tok/s the model
predicts now, and, with ``--sweep NAME`` (the runs of that scenario name in the same history,
as benchmarks/plan_accuracy.py records them), what was measured and both errors. Plans recorded
before the observation was kept are named and skipped.

Each launch draws its own prefill time (on an H200 the same batch's prefill took 13-33 ms from
launch to launch, the decode cycles steady: benchmarks/wall_parts.py), and the model carries
the profiled launch's into every step count. So, for a SQLite history, the table also gives
each measured point "prefill levelled": its tokens over its median repeat's wall with its own
prefill replaced by the profiled run's (``wall - prefill + profiled prefill``), and today's
error against that: the model's own error, the launches' prefill states taken out.

A SQLite history is read from a copy (recorded_history.read_copy): perfgate brings an older
schema to its own revision as it opens a history, and a committed record keeps its bytes.

Exit code: 0; 64 on a history without a plan's profiled run; 69 where the history cannot be read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plan_accuracy import measured_by_steps
from recorded_history import connect, read_copy
from wall_parts import repeats

from perfgate.errors import PerfgateError
from perfgate.plan.compare import observation_of
from perfgate.plan.forecast import predict
from perfgate.store import close_history, list_runs, open_existing_history


def profiled_runs(db: str) -> list[tuple[int | None, str, dict[str, Any]]]:
    """Every run whose recorded config holds a plan's profiled entry: id, scenario, entry."""
    sessions = open_existing_history(db)
    try:
        with sessions() as session:
            runs = list_runs(session)
    finally:
        close_history(sessions)
    return [
        (r.id, r.measurement.scenario, r.measurement.config["plan"])
        for r in runs
        if r.measurement.config.get("plan", {}).get("role") == "profiled"
    ]


def prefill_and_wall(db: str) -> dict[int, tuple[float, float, int]]:
    """Per run of a SQLite history, its spec server's median prefill and repeat wall (ms) and
    its output tokens; empty for another database."""
    if not db.startswith("sqlite:///"):
        return {}
    found: dict[int, tuple[float, float, int]] = {}
    with connect(db.removeprefix("sqlite:///"), immutable=False) as connection:
        for (run,) in connection.execute("SELECT id FROM runs"):
            rows = repeats(connection, run, "spec")
            if rows:
                prefill = statistics.median(r["prefill"] for r in rows)
                wall = statistics.median(r["wall"] for r in rows)
                found[run] = (prefill, wall, int(rows[0]["tokens"]))
    return found


def levelled(
    parts: dict[int, tuple[float, float, int]], run: int | None, profiled: int | None
) -> float | None:
    """A measured run's tok/s with its prefill replaced by the profiled run's."""
    if run not in parts or profiled not in parts:
        return None
    prefill, wall, tokens = parts[run]
    return tokens / (wall - prefill + parts[profiled][0]) * 1e3


def replan(
    entry: dict[str, Any],
    swept: dict[int, dict[str, Any]],
    parts: dict[int, tuple[float, float, int]] | None = None,
    profiled: int | None = None,
) -> list[str]:
    """One profiled run's table: per step count, recorded and current prediction, measured,
    and the measured with the profiled run's prefill (where the history has the parts)."""
    observation = observation_of(entry["observation"])
    now = predict(observation, entry["seed"], entry["replicates"])
    recorded = {p["steps"]: p["output_tok_s"][0] for p in entry["predicted"]}
    lines = [
        "| steps | recorded prediction | today's model | measured | recorded error | "
        "today's error | measured, prefill levelled | today's error on it |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for point in now.points:
        value, was = point["output_tok_s"].value, recorded.get(point.steps)
        measured = swept.get(point.steps, {})
        truth = measured.get("output_tok_s")
        level = levelled(parts or {}, measured.get("run"), profiled)
        cells = [f"{was:.1f}" if was is not None else "-", f"{value:.1f}"]
        cells.append(f"{truth:.1f}" if truth else "-")
        cells.append(f"{was / truth - 1:+.1%}" if truth and was is not None else "-")
        cells.append(f"{value / truth - 1:+.1%}" if truth else "-")
        cells.append(f"{level:.1f}" if level else "-")
        cells.append(f"{value / level - 1:+.1%}" if level else "-")
        lines.append(f"| {point.steps} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the history: sqlite:///PATH or a URL")
    parser.add_argument("--sweep", help="the scenario name of a sweep's runs to compare with")
    args = parser.parse_args(argv)
    try:
        with read_copy(args.db) as db:
            profiled = profiled_runs(db)
            swept = measured_by_steps(db, args.sweep) if args.sweep else {}
            parts = prefill_and_wall(db) if args.sweep else {}
    except PerfgateError as error:
        print(f"--db {args.db}: {error}", file=sys.stderr)
        return 69
    if not profiled:
        print(
            f"--db {args.db}: no plan's profiled run in it (run `perfgate plan`)", file=sys.stderr
        )
        return 64
    for run_id, scenario, entry in profiled:
        print(f"\n## Run #{run_id} ({scenario}), profiled at {entry['steps']} steps\n")
        if "observation" not in entry:
            print("Recorded before plans kept their observation: nothing to predict from.")
            continue
        print("\n".join(replan(entry, swept, parts, run_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
