"""Processes that record runs, for the crash and concurrency tests (started by multiprocessing).

They start from a fork server that has imported this module already, so a worker is recording
within milliseconds of its start: the tests' random kill points land in the recording, not in
Python's start-up.
"""

from __future__ import annotations

import enum
import multiprocessing
import traceback
from dataclasses import replace
from multiprocessing.context import ForkServerContext
from typing import Any

from sqlalchemy import Connection, func, select

from perfgate.results import RunRecord
from perfgate.store import close_history, open_history, record_run
from perfgate.store.models import OutputRow, PhaseRow, RunRow, SampleRow, VerdictRow

from ..factories import measurement, mode_result, record


class Stage(enum.IntEnum):
    """Where a recording worker is; shared with the parent, read after a kill."""

    STARTING = 0
    OPENING = 1  # connecting, checking or migrating the schema
    WRITING = 2  # inside a recording transaction, before its commit
    COMMITTING = 3  # every row flushed; the commit is under way
    BETWEEN = 4  # a run committed, the next not begun


def context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload([__name__])
    return ctx


def large_record(scenario: str = "tiny", prompts: int = 20, repeats: int = 10) -> RunRecord:
    """A run with a few hundred rows, so that a transaction is long enough to be hit."""
    outputs = tuple(tuple(range(i, i + 128)) for i in range(prompts))
    base = measurement(scenario=scenario)
    spec = replace(mode_result("spec", 120.0, repeats=repeats), outputs=outputs)
    plain = replace(mode_result("plain", 100.0, repeats=repeats), outputs=outputs)
    return record(replace(base, spec=spec, plain=plain, equivalence=base.equivalence))


def expected_rows(run: RunRecord) -> dict[str, int]:
    """How many rows of each child table one recorded run has."""
    m = run.measurement
    return {
        "samples": sum(len(v) for r in (m.spec, m.plain) for v in r.samples.values())
        + len(m.samples().get("speedup", ())),
        "phases": len(m.spec.phases) + len(m.plain.phases),
        "outputs": len(m.equivalence.prompts),
        "verdicts": len(run.verdicts),
    }


def rows_per_run(connection: Connection) -> dict[str, dict[int, int]]:
    """For each child table: run id -> its row count (orphans included, under their run id)."""
    result = {}
    for table in (SampleRow, PhaseRow, OutputRow, VerdictRow):
        counts = select(table.run_id, func.count()).group_by(table.run_id)
        result[table.__tablename__] = {run_id: n for run_id, n in connection.execute(counts)}
    return result


def run_count(connection: Connection) -> int:
    return int(connection.scalar(select(func.count()).select_from(RunRow)) or 0)


def record_until_killed(url: str, stage: Any, committed: Any) -> None:
    """Record runs, one transaction each, until killed; say where it is in `stage`."""
    run = large_record()
    stage.value = Stage.OPENING
    sessions = open_history(url)
    while True:
        stage.value = Stage.WRITING
        with sessions.begin() as session:
            record_run(session, run)  # flushes every row
            stage.value = Stage.COMMITTING
        committed.value += 1
        stage.value = Stage.BETWEEN


def record_many(url: str, worker: int, runs: int, go: Any, results: Any) -> None:
    """Wait for `go`, then record `runs` runs; report ("ok", ids) or ("error", traceback)."""
    run = large_record(scenario=f"worker-{worker}", prompts=4, repeats=5)
    go.wait()
    try:
        sessions = open_history(url)
        ids = []
        for _ in range(runs):
            with sessions.begin() as session:
                ids.append(record_run(session, run))
        close_history(sessions)
        results.put((worker, "ok", ids))
    except BaseException:
        results.put((worker, "error", traceback.format_exc()))
