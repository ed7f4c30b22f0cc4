"""Verdicts map to rows and files from one definition, and every field comes back."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest
from sqlalchemy import inspect
from sqlalchemy.orm import Session, sessionmaker

from perfgate.gate.attribution import Attribution, PhaseShift
from perfgate.gate.verdict import Status, Verdict
from perfgate.store import load_run, record_run
from perfgate.store.columns import columns_from_records, history_columns
from perfgate.store.models import VerdictRow
from perfgate.store.run_dicts import run_from_dict, run_to_dict
from perfgate.store.verdicts import (
    VERDICT_FIELDS,
    stored_values,
    verdict_from_row,
    verdict_from_values,
    verdict_row,
)

from ..factories import measurement, record

SHIFT = PhaseShift("verify", 5.0, 6.0, 0.8)
# Every field set to a value other than its default.
FULL = Verdict(
    metric="output_tok_s",
    status=Status.REGRESSION,
    message="-10%",
    baseline=100.0,
    current=90.0,
    change=-0.1,
    ci_low=-0.12,
    ci_high=-0.08,
    tolerance=0.03,
    runs=2,
    baseline_runs=5,
    p_value=0.01,
    alpha=0.05,
    attribution=Attribution("output_tok_s", -0.1, SHIFT, (SHIFT,), (2.5, 2.4), None, "verify"),
    with_runs=(3, 4),
    planned_runs=2,
    run_budget=4,
    runner_s=104.5,
)


def test_every_verdict_field_is_mapped_once() -> None:
    names = [f.name for f in dataclasses.fields(Verdict)]
    assert [f.attribute for f in VERDICT_FIELDS] == names


def test_every_verdict_column_is_mapped() -> None:
    kept = {f.column for f in VERDICT_FIELDS if f.column} | {"id", "run_id", "detail"}
    assert kept == {c.key for c in inspect(VerdictRow).columns}


def test_the_full_verdict_sets_every_field() -> None:
    defaults = Verdict("m", Status.PASS, "")
    unset = [
        f.name
        for f in dataclasses.fields(Verdict)
        if getattr(FULL, f.name) == getattr(defaults, f.name)
    ]
    assert unset == []


@pytest.mark.parametrize(
    "verdict", [FULL, Verdict("speedup", Status.PASS, "ok")], ids=["full", "bare"]
)
def test_a_verdict_round_trips_through_a_row(verdict: Verdict) -> None:
    assert verdict_from_row(verdict_row(verdict)) == verdict


@pytest.mark.parametrize(
    "verdict", [FULL, Verdict("speedup", Status.PASS, "ok")], ids=["full", "bare"]
)
def test_a_verdict_round_trips_through_json(verdict: Verdict) -> None:
    text = json.dumps(stored_values(verdict))
    assert verdict_from_values(json.loads(text)) == verdict


def test_a_row_keeps_the_status_by_name_and_the_rest_in_detail() -> None:
    row = verdict_row(FULL)
    assert row.status == "regression"
    assert row.detail is not None
    assert row.detail["with_runs"] == [3, 4]
    assert set(row.detail) == {
        "runs",
        "baseline_runs",
        "p_value",
        "alpha",
        "attribution",
        "with_runs",
        "planned_runs",
        "run_budget",
        "runner_s",
    }


def test_an_older_row_without_detail_reads_as_unset() -> None:
    row = verdict_row(FULL)
    row.detail = None
    read = verdict_from_row(row)
    assert (read.runs, read.p_value, read.attribution, read.with_runs) == (None, None, None, ())
    assert read.ci_low == FULL.ci_low


def test_a_file_verdict_with_an_unknown_or_missing_field_is_refused() -> None:
    values = stored_values(FULL)
    with pytest.raises(TypeError, match="'colour'"):
        verdict_from_values({**values, "colour": "red"})
    del values["metric"]
    with pytest.raises(KeyError):
        verdict_from_values(values)


def test_a_full_verdict_survives_the_history_and_an_export(sessions: sessionmaker[Session]) -> None:
    run = replace(record(measurement()), verdicts=(FULL,))
    with sessions.begin() as session:
        run_id = record_run(session, run)
    with sessions() as session:
        loaded = load_run(session, run_id)
        columns = history_columns(session)
    assert loaded.verdicts == (FULL,)
    assert run_from_dict(json.loads(json.dumps(run_to_dict(loaded)))).verdicts == (FULL,)
    facts = columns.verdicts["output_tok_s"][run_id]
    assert (facts.status, facts.baseline, facts.current, facts.change, facts.tolerance) == (
        "regression",
        100.0,
        90.0,
        -0.1,
        0.03,
    )
    # The report reads the same facts from records not yet in the history.
    assert columns_from_records([loaded]).verdicts["output_tok_s"][run_id] == facts
