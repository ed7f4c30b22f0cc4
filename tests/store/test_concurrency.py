"""8 processes recording 50 runs each at once, into one new history: 400 runs, no error."""

from __future__ import annotations

import queue
import time

import pytest

from perfgate.store import RunFilter, close_history, open_history, run_ids

from ..hang import HANG_S
from .test_migrations import engine_for
from .workers import context, expected_rows, large_record, record_many, rows_per_run

WORKERS, RUNS = 8, 50


@pytest.mark.slow
def test_8_processes_record_400_runs_at_once(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = context()
    go, results = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=record_many, args=(db_url, k, RUNS, go, results)) for k in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    began = time.perf_counter()
    go.set()  # all at once, on a history that does not exist yet: they race to create it too
    reports = [results.get(timeout=HANG_S) for _ in workers]
    elapsed = time.perf_counter() - began
    for worker in workers:
        worker.join(timeout=30)
    errors = [text for _, status, text in reports if status != "ok"]
    assert errors == [], errors[0]
    assert all(worker.exitcode == 0 for worker in workers)
    ids = [run_id for _, _, got in reports for run_id in got]
    assert len(ids) == len(set(ids)) == WORKERS * RUNS

    by_worker = {worker: got for worker, _, got in reports}
    sessions = open_history(db_url)
    with sessions() as session:
        for k in range(WORKERS):
            assert run_ids(session, RunFilter(scenario=f"worker-{k}")) == by_worker[k]
    close_history(sessions)
    expected = expected_rows(large_record(prompts=4, repeats=5))
    with engine_for(db_url) as engine, engine.connect() as connection:
        for table, per_run in rows_per_run(connection).items():
            assert sorted(per_run) == sorted(ids) and set(per_run.values()) == {expected[table]}
    with capsys.disabled():
        print(f"\n  {WORKERS} x {RUNS} runs: {len(ids)} recorded in {elapsed:.1f} s, no error")
    with pytest.raises(queue.Empty):
        results.get_nowait()
