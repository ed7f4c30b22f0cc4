"""Baseline files: validated on load with file and field named, written atomically."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baselines import approve_run, dump_baseline, load_baseline, write_baseline
from perfgate.errors import ConfigError


def _approve(existing=None, fingerprint=None, run_id=1, machine=None):  # type: ignore[no-untyped-def]
    """Approve a run of this fingerprint, on this machine (the fingerprint's soft field)."""
    fingerprint = {**(fingerprint or {"gpu": "none"}), **({"machine": machine} if machine else {})}
    return approve_run(
        existing,
        profile="cpu",
        scenario="tiny",
        fingerprint=fingerprint,
        samples={"output_tok_s": [100.0, 101.0], "verify_ms": [5.0, 5.1]},
        phase_ms={"spec": {"verify": (5.2, 5.3), "cycle": (7.0, 7.1)}, "plain": {"cycle": (3.0,)}},
        tolerances={"output_tok_s": 0.05, "verify_ms": 0.1},
        gated=["output_tok_s", "verify_ms"],
        run_id=run_id,
        commit="abc",
        approved_by="alice",
        reason="first baseline",
    )


def test_written_file_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "cpu" / "tiny.json"
    baseline = _approve()
    write_baseline(baseline, path)
    loaded = load_baseline(path)
    assert loaded.runs == baseline.runs and loaded.tolerances == baseline.tolerances
    assert loaded.metric_runs()["output_tok_s"] == [(100.0, 101.0)]
    assert loaded.phase_runs("spec") == [{"verify": (5.2, 5.3), "cycle": (7.0, 7.1)}]
    assert loaded.schema_version == 2
    text = path.read_text()
    assert text == dump_baseline(baseline)
    assert list(json.loads(text)) == sorted(json.loads(text)), "keys are sorted for diffs"


def test_keeps_the_last_k_runs_and_restarts_on_a_new_environment() -> None:
    baseline = _approve()
    for run_id in range(2, 9):
        baseline = _approve(baseline, run_id=run_id)
    assert [r.run_id for r in baseline.runs] == [4, 5, 6, 7, 8]
    moved = _approve(baseline, fingerprint={"gpu": "H200"}, run_id=9)
    assert [r.run_id for r in moved.runs] == [9]


def test_the_machines_of_one_kind_share_a_baseline_and_each_run_names_its_own(
    tmp_path: Path,
) -> None:
    baseline = _approve(machine="gpus-a")
    baseline = _approve(baseline, run_id=2, machine="gpus-b")
    baseline = _approve(baseline, run_id=3, machine="gpus-a")
    baseline = _approve(baseline, run_id=4)  # a run that names no machine (an older perfgate)
    assert [r.run_id for r in baseline.runs] == [1, 2, 3, 4]  # one history, not four
    assert baseline.machines() == ("gpus-a", "gpus-b")
    assert baseline.fingerprint == {"gpu": "none"}  # the environment: no machine in it
    path = tmp_path / "tiny.json"
    write_baseline(baseline, path)
    assert load_baseline(path).machines() == ("gpus-a", "gpus-b")
    assert "machine" not in json.loads(path.read_text())["runs"][3]  # none named: no field
    # The machines are the kept runs' own: those of runs that rotated out go with them.
    kept = _approve(replace(baseline, keep=2), run_id=5, machine="gpus-c")
    assert [r.run_id for r in kept.runs] == [4, 5] and kept.machines() == ("gpus-c",)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(schema_version="2"), "schema_version"),
        (lambda d: d["runs"][0].pop("phase_ms"), "runs[0].phase_ms"),
        (lambda d: d["runs"][0]["phase_ms"].update(gpu={}), "runs[0].phase_ms.gpu"),
        (
            lambda d: d["runs"][0]["phase_ms"]["spec"].update(verify=[-1]),
            "runs[0].phase_ms.spec.verify",
        ),
        (lambda d: d["tolerances"].update(output_tok_s=3), "tolerances.output_tok_s"),
        (
            lambda d: d["runs"][0]["samples"].update(output_tok_s=["fast"]),
            "runs[0].samples.output_tok_s",
        ),
        (lambda d: d["runs"][0].pop("approved_by"), "runs[0].approved_by"),
        (lambda d: d["runs"][0]["samples"].pop("verify_ms"), "runs[*].samples.verify_ms"),
        (lambda d: d.update(gated=["speed"]), "gated"),
        (lambda d: d.update(gated=[]), "gated"),  # else every verdict would pass, judging nothing
        (lambda d: d["runs"][0].update(machine=""), "runs[0].machine"),
        (lambda d: d["runs"][0].update(machine=7), "runs[0].machine"),
    ],
)
def test_invalid_files_name_the_field(tmp_path: Path, mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "tiny.json"
    document = json.loads(dump_baseline(_approve()))
    mutate(document)
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        load_baseline(path)
    assert str(caught.value).startswith(f"{path}:{field}:"), str(caught.value)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such baseline.*perfgate baseline update"):
        load_baseline(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{ not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_baseline(tmp_path / "bad.json")
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(ConfigError, match=r"folder\.json: is a folder, not a baseline file; "):
        load_baseline(tmp_path / "folder.json")


def test_a_schema_1_file_is_read_without_phases_and_rewritten_as_schema_2(tmp_path: Path) -> None:
    document = json.loads(dump_baseline(_approve()))
    document["schema_version"] = 1
    for run in document["runs"]:
        del run["phase_ms"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    old = load_baseline(path)
    assert old.schema_version == 1 and old.phase_runs("spec") == []
    assert old.metric_runs()["verify_ms"] == [(5.0, 5.1)]
    write_baseline(old, path)
    assert json.loads(path.read_text())["schema_version"] == 2
    assert load_baseline(path).runs[0].phase_ms == {}


def test_a_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    document = json.loads(dump_baseline(_approve()))
    document["schema_version"] = 3
    path = tmp_path / "new.json"
    path.write_text(json.dumps(document))
    with pytest.raises(
        ConfigError, match=r"schema_version: is 3, this perfgate reads 1, 2; upgrade"
    ):
        load_baseline(path)
