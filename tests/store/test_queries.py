"""The history's questions: a metric across runs, the last K runs, runs of a branch or PR."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from perfgate.gate.verdict import Status
from perfgate.results import RunContext
from perfgate.store import (
    RunFilter,
    iter_runs,
    last_runs,
    list_runs,
    load_runs,
    metric_history,
    record_run,
    run_ids,
)

from ..factories import measurement, record

START = datetime(2026, 11, 1, tzinfo=UTC)


def add_runs(sessions: sessionmaker[Session], specs: list[dict[str, object]]) -> list[int]:
    """Record one run per spec: hour offset, scenario, verify_ms, status, branch, pr, profile."""
    ids = []
    with sessions.begin() as session:
        for spec in specs:
            m = measurement(
                scenario=str(spec.get("scenario", "tiny")),
                verify_ms=float(spec.get("verify_ms", 5.0)),  # type: ignore[arg-type]
                started=START + timedelta(hours=int(spec["hour"])),  # type: ignore[call-overload]
            )
            m = replace(m, profile=str(spec.get("profile", "cpu")))
            status = Status(str(spec.get("status", "pass")))
            context = RunContext("c0", spec.get("branch", "main"), spec.get("pr"))  # type: ignore[arg-type]
            ids.append(record_run(session, replace(record(m, status), context=context)))
    return ids


def test_a_metrics_history_is_in_run_time_order_with_every_repeat(
    sessions: sessionmaker[Session],
) -> None:
    # Recorded out of time order; another scenario and another profile are left out.
    ids = add_runs(sessions, [
        {"hour": 2, "verify_ms": 7.0}, {"hour": 0, "verify_ms": 5.0},
        {"hour": 1, "verify_ms": 6.0}, {"hour": 3, "scenario": "other"},
        {"hour": 4, "profile": "h200x8"},
    ])  # fmt: skip
    with sessions() as session:
        points = metric_history(session, "tiny", "cpu", "verify_ms")
        newest_two = metric_history(session, "tiny", "cpu", "verify_ms", limit=2)
        plain = metric_history(session, "tiny", "cpu", "output_tok_s", mode="plain")
        speedup = metric_history(session, "tiny", "cpu", "speedup")
        missing = metric_history(session, "tiny", "cpu", "no_such_metric")
    assert [p.run_id for p in points] == [ids[1], ids[2], ids[0]]
    assert [p.values for p in points] == [(5.0,) * 3, (6.0,) * 3, (7.0,) * 3]
    assert points[0].started_at == START and points[0].branch == "main"
    assert [p.run_id for p in newest_two] == [ids[2], ids[0]]
    assert plain[0].values == (100.0, 101.0, 102.0)
    assert speedup[0].values[0] == 120.0 / 100.0
    assert missing == []


def test_the_last_k_runs_of_a_scenario_and_profile(sessions: sessionmaker[Session]) -> None:
    ids = add_runs(sessions, [
        {"hour": 0}, {"hour": 1, "status": "regression"}, {"hour": 2},
        {"hour": 3, "profile": "h200x8"}, {"hour": 4, "status": "inconclusive"},
    ])  # fmt: skip
    with sessions() as session:
        assert [r.id for r in last_runs(session, "tiny", "cpu", 3)] == [ids[1], ids[2], ids[4]]
        assert [r.id for r in last_runs(session, "tiny", "cpu", 2, "pass")] == [ids[0], ids[2]]
        assert last_runs(session, "tiny", "gpu", 5) == []


def test_runs_of_a_branch_a_pull_request_or_a_status(sessions: sessionmaker[Session]) -> None:
    ids = add_runs(sessions, [
        {"hour": 0}, {"hour": 1, "branch": "fast-verify", "pr": "41"},
        {"hour": 2, "branch": "fast-verify", "pr": "41", "status": "regression"},
        {"hour": 3, "branch": "nccl", "pr": "42"},
    ])  # fmt: skip
    with sessions() as session:
        by_branch = list_runs(session, where=RunFilter(branch="fast-verify"))
        by_pr = list_runs(session, where=RunFilter(pr="42"))
        failed = list_runs(session, where=RunFilter(status="regression"))
        both = run_ids(session, RunFilter(branch="fast-verify", status="pass"))
    assert [r.id for r in by_branch] == ids[1:3]
    assert [r.id for r in by_pr] == [ids[3]] and by_pr[0].context.branch == "nccl"
    assert [r.id for r in failed] == [ids[2]] and failed[0].status is Status.REGRESSION
    assert both == [ids[1]]


def test_runs_stream_in_batches_and_load_by_id(sessions: sessionmaker[Session]) -> None:
    ids = add_runs(sessions, [{"hour": h} for h in range(7)])
    with sessions() as session:
        streamed = [r.id for r in iter_runs(session, batch=3)]
        approved = [r.id for r in load_runs(session, [ids[5], ids[1], 10_000])]
    assert streamed == ids
    assert approved == [ids[1], ids[5]]
