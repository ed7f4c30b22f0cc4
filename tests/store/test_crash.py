"""kill -9 of a recording process, at random points: the history opens, holds only whole runs,
and takes the next run."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from typing import Any

import pytest

from perfgate.store import close_history, open_history, record_run

from .test_migrations import engine_for
from .workers import (
    Stage,
    context,
    expected_rows,
    large_record,
    record_until_killed,
    rows_per_run,
    run_count,
)

KILLS = 50
MAX_DELAY_S = 0.4  # past the open (tens of ms) and through a few dozen recorded runs


@pytest.mark.slow
def test_kill_9_at_50_random_points_loses_no_run_and_leaves_no_partial_one(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx, rng = context(), random.Random(5)
    stage, committed = ctx.Value("i", 0, lock=False), ctx.Value("i", 0, lock=False)
    expected = expected_rows(large_record())
    landed: Counter[str] = Counter()
    total = 0
    for kill in range(KILLS):
        stage.value, committed.value = Stage.STARTING, 0
        worker = ctx.Process(target=record_until_killed, args=(db_url, stage, committed))
        worker.start()
        if kill % 2:
            time.sleep(rng.uniform(0.0, MAX_DELAY_S))  # anywhere: starting, opening, recording
        else:
            # Inside a recording transaction, however slowly a loaded machine got there.
            _wait_until_writing(stage, committed, rng.randint(0, 2), worker)
        os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join()
        assert worker.exitcode == -signal.SIGKILL, "the worker died before it was killed"
        landed[Stage(stage.value).name] += 1
        total = check_after_kill(db_url, total, committed.value, Stage(stage.value), expected)
    with capsys.disabled():
        print(f"\n  {KILLS} kills; landed: {dict(landed)}; {total} whole runs, none partial")
    assert landed[Stage.WRITING.name] > 0, "no kill landed inside a recording transaction"


def _wait_until_writing(stage: Any, committed: Any, after: int, worker: Any) -> None:
    """Return once the worker is inside a transaction, `after` commits in (two minutes at
    most): what it is doing decides when the kill lands, not how fast the machine is."""
    deadline = time.monotonic() + 120
    while not (stage.value == Stage.WRITING and committed.value >= after):
        assert worker.is_alive(), "the worker died before it was killed"
        assert time.monotonic() < deadline, f"the worker never got to write (at {stage.value})"
        time.sleep(0.0005)


def check_after_kill(
    url: str, before: int, committed: int, stage: Stage, expected: dict[str, int]
) -> int:
    """The history opens, holds whole runs only, kept every commit, and takes one more run."""
    sessions = open_history(url)
    with engine_for(url) as engine, engine.connect() as connection:
        runs, children = run_count(connection), rows_per_run(connection)
    added = runs - before
    # A commit the worker had not counted yet can only be the one it was making.
    assert added == committed or (added == committed + 1 and stage is Stage.COMMITTING)
    for table, per_run in children.items():
        assert len(per_run) == runs, f"{table}: rows of a run that is not there, or missing"
        assert set(per_run.values()) <= {expected[table]}, f"{table}: a partial run"
    with sessions.begin() as session:
        record_run(session, large_record())
    close_history(sessions)
    return runs + 1
