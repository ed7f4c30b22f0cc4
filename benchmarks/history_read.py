"""Time reading one metric's history from a large history database.

Builds (once, then reuses) a history of RUNS runs of one scenario on one profile, each with
METRICS metrics of REPEATS samples, plus phase rows, through perfgate's own schema; then times
`perfgate.store.metric_history` for one metric across all runs: cold (a fresh open, as a
`perfgate` command does) and warm (the same session again), and prints the medians.

    PYTHONPATH=$PWD python benchmarks/history_read.py                 # SQLite, 10,000 x 20
    PYTHONPATH=$PWD python benchmarks/history_read.py --db postgresql://USER@HOST/DB

Not a test: figures depend on the machine. The goal on SQLite: under 200 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from perfgate.store import close_history, metric_history, open_history
from perfgate.store.models import PhaseRow, RunRow, SampleRow

SCENARIO, PROFILE = "eagle3-2step", "h200x8"
PHASES = ("draft", "verify", "draft_extend", "accept", "cycle")


def metric_names(count: int) -> list[str]:
    """The gate's metrics first, then made-up ones up to `count`."""
    known = ["output_tok_s", "accept_length", "speedup", "verify_ms", "draft_ms"]
    known += ["draft_extend_ms", "cycle_ms", "ttft_ms"]
    return (known + [f"metric_{i:02d}" for i in range(count)])[:count]


def fill_in_batches(
    url: str, runs: int, write: Callable[[Session, range], None], batch: int = 500
) -> None:
    """Bring the history at `url` up to `runs` runs: `write(session, indexes)` adds the runs
    of each batch in one transaction. A history that has them already is left as it is."""
    sessions = open_history(url)
    with sessions() as session:
        have = session.scalar(select(func.count()).select_from(RunRow)) or 0
    for first in range(have, runs, batch):
        with sessions.begin() as session:
            write(session, range(first, min(runs, first + batch)))
        print(f"  filled {min(runs, first + batch)}/{runs} runs", file=sys.stderr, end="\r")
    if have < runs:
        print(file=sys.stderr)
    if have < runs and sessions.kw["bind"].dialect.name == "postgresql":
        with sessions.begin() as session:
            session.execute(text("ANALYZE"))  # as autovacuum would after a bulk load
    close_history(sessions)


def fill(url: str, runs: int, metrics: int, repeats: int) -> None:
    """Write `runs` runs of synthetic samples (skipped when the history already has them)."""
    names = metric_names(metrics)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def write(session: Session, indexes: range) -> None:
        ids = [_insert_run(session, start + timedelta(hours=i)) for i in indexes]
        session.execute(insert(SampleRow), [
            {"run_id": run_id, "mode": "spec", "metric": name, "repeat": r,
             "value": 100.0 + (run_id % 17) + r * 0.1}
            for run_id in ids for name in names for r in range(repeats)
        ])  # fmt: skip
        session.execute(insert(PhaseRow), [
            {"run_id": run_id, "mode": "spec", "phase": phase, "repeat": r, "cycles": 40,
             "median_ms": 5.0, "mean_ms": 5.1, "p90_ms": 5.5}
            for run_id in ids for phase in PHASES for r in range(repeats)
        ])  # fmt: skip

    fill_in_batches(url, runs, write)


def _insert_run(session: Session, started: datetime) -> int:
    row = RunRow(
        scenario=SCENARIO, profile=PROFILE, engine="sglang", status="pass",
        started_at=started, finished_at=started + timedelta(minutes=3), commit="0" * 40,
        branch="main", pr=None, ci_url=None, dirty=False, equivalent=True,
        fingerprint={"gpu": "H200", "gpu_count": "8"}, config={"steps": 2}, servers={},
    )  # fmt: skip
    session.add(row)
    session.flush()
    return row.id


def time_reads(url: str, metric: str, times: int) -> tuple[list[float], list[float], int]:
    """Cold and warm seconds per read of `metric`'s history; and how many values it held."""
    cold, warm, values = [], [], 0
    for _ in range(times):
        began = time.perf_counter()
        sessions = open_history(url)
        with sessions() as session:
            points = metric_history(session, SCENARIO, PROFILE, metric)
            cold.append(time.perf_counter() - began)
            began = time.perf_counter()
            points = metric_history(session, SCENARIO, PROFILE, metric)
            warm.append(time.perf_counter() - began)
        close_history(sessions)
        values = sum(len(p.values) for p in points)
    return cold, warm, values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite:///.perfgate/bench/history-read.db")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--times", type=int, default=20, help="reads to time")
    parser.add_argument("--metric", default="verify_ms")
    args = parser.parse_args()
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    fill(args.db, args.runs, args.metrics, args.repeats)
    print(f"history ready in {time.perf_counter() - began:.1f} s: {args.runs} runs x "
          f"{args.metrics} metrics x {args.repeats} repeats at {args.db}")  # fmt: skip
    cold, warm, values = time_reads(args.db, args.metric, args.times)
    print(f"metric_history({args.metric!r}): {values} values from {args.runs} runs")
    for name, seconds in (("cold (open + read)", cold), ("warm (read)", warm)):
        print(f"  {name:<19} median {statistics.median(seconds) * 1000:7.1f} ms, "
              f"min {min(seconds) * 1000:7.1f} ms, max {max(seconds) * 1000:7.1f} ms "
              f"over {len(seconds)} reads")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
