"""The report's data: per-group columns, bands, verdicts, change points, environment changes."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from perfgate.report.chart_data import (
    STATUSES,
    build_payload,
    describe_fingerprint_change,
    group_runs,
    rounded,
    sweeps_of,
)
from perfgate.store.columns import columns_from_records

from .history import REPO, stepped_history, sweep_history


def payload_of(history):  # type: ignore[no-untyped-def]
    recorded = [replace(r, id=i + 1) for i, r in enumerate(history)]
    columns = columns_from_records(recorded)
    groups = group_runs(columns)
    return build_payload(columns, groups, sweeps_of(columns), REPO)


def test_a_groups_series_carry_the_step_its_change_point_and_its_verdicts() -> None:
    payload = payload_of(stepped_history(runs=40))
    (group,) = payload["groups"]
    assert (group["scenario"], group["profile"], len(group["runs"])) == ("tiny", "cpu", 40)
    verify = group["series"]["spec.verify_ms"]
    assert len(verify) == 40 and all(math.isclose(v, 5.0, rel_tol=0.05) for v in verify[:20])
    (change,) = group["changes"]["spec.verify_ms"]
    position, before, after, p_value = change
    assert (position, round(before), round(after)) == (20, 5, 6) and p_value < 1e-4
    regression = STATUSES.index("regression")
    assert group["verdicts"]["verify_ms"] == [0] * 20 + [regression] * 20
    # The band moves only when the baseline does: one step for the whole history.
    assert group["bands"]["output_tok_s"] == [[0, 76.0, 84.0]]
    assert group["fingerprints"] == [[30, "torch: 2.13.0 → 2.14.0"]]


def test_phases_are_per_run_means_and_leave_other_to_the_cycle() -> None:
    group = payload_of(stepped_history(runs=4))["groups"][0]
    phases = group["phases"]
    assert set(phases) == {"draft", "verify", "draft_extend", "accept", "cycle"}
    named = sum(phases[p][0] for p in ("draft", "verify", "draft_extend", "accept"))
    assert math.isclose(phases["cycle"][0] - named, 0.5, abs_tol=0.01)


def test_runs_are_columns_with_short_commits_and_ci_urls() -> None:
    runs = payload_of(stepped_history(runs=6))["runs"]
    assert runs["id"] == [1, 2, 3, 4, 5, 6]
    assert runs["t"] == [0, 3600, 7200, 10800, 14400, 18000]
    assert runs["commit"][1] == f"{1:040x}"[:12]
    assert runs["ciPrefix"] == f"{REPO}/actions/runs/" and runs["ci"][1] == "~1001"
    assert runs["reused"] == [None] * 6
    assert runs["seconds"] == [30] * 6  # each run's runner time, start to end


def test_sweeps_and_groups_of_other_scenarios() -> None:
    payload = payload_of([*stepped_history(runs=5), *sweep_history()])
    assert [g["scenario"] for g in payload["groups"]] == [
        "sweep-s1",
        "sweep-s2",
        "sweep-s3",
        "tiny",
    ]
    (sweep,) = payload["sweeps"]
    assert sweep["steps"] == [1, 2, 3] and sweep["draftTokens"] == [2, 3, 4]


def test_values_keep_four_significant_digits_and_missing_ones_are_null() -> None:
    values = np.array([123.456, 0.0123456, 98765.4, 1.0, 0.0, math.nan, math.inf, -2.34567])
    assert rounded(values) == [123.5, 0.01235, 98770.0, 1.0, 0.0, None, None, -2.346]


def test_a_fingerprint_change_names_each_field_that_moved() -> None:
    before = {"torch": "2.4", "gpu": "H200", "env.NCCL_ALGO": "Ring"}
    after = {"torch": "2.5", "gpu": "H200", "driver": "550"}
    assert describe_fingerprint_change(before, after) == (
        "driver: (none) → 550; env.NCCL_ALGO: Ring → (none); torch: 2.4 → 2.5"
    )
