"""The history: a run goes in whole and comes back equal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from perfgate.errors import ConfigError, InfrastructureError
from perfgate.store import list_runs, load_run, open_history, record_run
from perfgate.store.models import RunRow, SampleRow

from .factories import measurement, record


def test_a_run_round_trips(tmp_path: Path) -> None:
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    original = record(measurement(spec_outputs=((1, 2, 3), (4, 5, 7))))
    with sessions.begin() as session:
        run_id = record_run(session, original)
    with sessions() as session:
        loaded = load_run(session, run_id)
    assert loaded.id == run_id
    m, o = loaded.measurement, original.measurement
    assert m.spec.samples == o.spec.samples and m.plain.samples == o.plain.samples
    assert m.samples()["speedup"] == pytest.approx(o.samples()["speedup"])
    assert m.spec.phases == o.spec.phases
    assert m.spec.outputs == o.spec.outputs and m.plain.outputs == o.plain.outputs
    assert m.equivalence == o.equivalence and not m.equivalence.ok
    assert m.fingerprint == o.fingerprint
    assert loaded.verdicts == original.verdicts and loaded.status == original.status
    assert loaded.context == original.context


def test_a_failed_transaction_leaves_no_partial_run(tmp_path: Path) -> None:
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with pytest.raises(RuntimeError), sessions.begin() as session:
        record_run(session, record(measurement()))
        raise RuntimeError("the process failed half-way")
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(RunRow)) == 0
        assert session.scalar(select(func.count()).select_from(SampleRow)) == 0


def test_runs_list_oldest_first_and_filter_by_scenario(tmp_path: Path) -> None:
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with sessions.begin() as session:
        for i, name in enumerate(["a", "b", "a", "a"]):
            record_run(
                session, record(measurement(scenario=name, started=start + timedelta(hours=i)))
            )
    with sessions() as session:
        assert [r.id for r in list_runs(session)] == [1, 2, 3, 4]
        assert [r.id for r in list_runs(session, scenario="a")] == [1, 3, 4]
        assert [r.id for r in list_runs(session, scenario="a", limit=2)] == [3, 4]


def test_unknown_run_and_bad_database(tmp_path: Path) -> None:
    sessions = open_history(f"sqlite:///{tmp_path / 'h.db'}")
    with sessions() as session, pytest.raises(ConfigError, match="no run 7 in the history"):
        load_run(session, 7)
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(InfrastructureError, match="cannot open the history database"):
        open_history(f"sqlite:///{tmp_path / 'junk.db'}")
