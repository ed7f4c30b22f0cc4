"""`perfgate history import`: an exported or kept run comes back equal, and goes in once."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from perfgate.gate.attribution import Attribution, PhaseShift
from perfgate.results import RunRecord
from perfgate.store import load_run
from perfgate.store.imports import import_runs
from perfgate.store.run_dicts import run_from_dict, run_to_dict

from ..factories import measurement, record
from ..in_process import perfgate_main

SHIFT = PhaseShift("verify", 5.0, 6.0, 0.8)
ATTRIBUTION = Attribution("output_tok_s", -0.1, SHIFT, (SHIFT,), (2.5, 2.4), None, "verify +1 ms")


def _judged(minutes: int = 0, with_runs: tuple[int, ...] = ()) -> RunRecord:
    base = measurement(spec_outputs=((1, 2, 3), (4, 5, 7)))
    moment = base.started_at + timedelta(minutes=minutes)
    run = record(replace(base, started_at=moment, finished_at=moment + timedelta(seconds=30)))
    verdict = replace(run.verdicts[0], attribution=ATTRIBUTION, with_runs=with_runs)
    return replace(run, verdicts=(verdict,), judged_against="baselines/cpu/tiny.json")


def test_an_exported_run_comes_back_equal() -> None:
    original = _judged(with_runs=(3, 4))
    assert run_from_dict(json.loads(json.dumps(run_to_dict(original)))) == original


def test_kept_runs_go_in_once_linked_as_their_session_would(
    sessions: sessionmaker[Session],
) -> None:
    kept = [_judged(0), _judged(1)]  # never recorded: no ids, not linked yet
    with sessions.begin() as session:
        first = import_runs(session, kept)
    assert [run.new for run in first] == [True, True]
    with sessions() as session:
        second = load_run(session, first[1].id)
    assert second.verdicts[0].with_runs == (first[0].id,)
    assert second.verdicts[0].attribution == ATTRIBUTION
    with sessions.begin() as session:
        again = import_runs(session, kept)
    assert again == [replace(run, new=False) for run in first]


def test_exported_runs_keep_their_links_under_new_ids(sessions: sessionmaker[Session]) -> None:
    exported = [replace(_judged(0), id=7), replace(_judged(1, with_runs=(7, 99)), id=8)]
    with sessions.begin() as session:
        imported = import_runs(session, exported)
    with sessions() as session:
        later = load_run(session, imported[1].id)
    assert later.verdicts[0].with_runs == (imported[0].id,)  # 99 is not in this history


def test_a_file_that_holds_no_runs_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(run_to_dict(_judged())) + "\n" + '{"scenario": "x"}\n')
    done = perfgate_main("history", "import", str(path), "--db", "sqlite:///h.db", cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stderr.startswith(f"perfgate: error: {path}: line 2: not a run as perfgate")
    assert not (tmp_path / "h.db").exists()


def _with_samples(values: list[object], key: str = "output_tok_s") -> dict[str, object]:
    data = run_to_dict(_judged())
    data["spec"]["samples"][key] = values  # type: ignore[index]
    return data


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            _with_samples([1.0, -1.0]),
            "the spec server's output_tok_s sample 1 is -1.0, not a finite number >= 0",
        ),
        (
            _with_samples(["inf"]),
            "the spec server's output_tok_s sample 0 is inf, not a finite number >= 0",
        ),
        (
            _with_samples(["nan"]),
            "the spec server's output_tok_s sample 0 is nan, not a finite number >= 0",
        ),
        (_with_samples([]), "the spec server's output_tok_s has no sample"),
        (_with_samples([1.0], key="x" * 51), "the spec server's metric name"),
        (
            {**run_to_dict(_judged()), "scenario": "s" * 201},
            "the scenario name is 201 characters long",
        ),
        (
            {k: v for k, v in run_to_dict(_judged()).items() if k != "equivalence"},
            "(no field 'equivalence')",
        ),
    ],
)
def test_a_run_a_measurement_could_not_give_is_refused_naming_its_line(
    tmp_path: Path, data: dict[str, object], problem: str
) -> None:
    """A sample below zero, infinite, or missing judged a later run a regression, and a NaN
    failed on the database's constraint, naming neither the file nor the line."""
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(run_to_dict(_judged(1))) + "\n" + json.dumps(data) + "\n")
    done = perfgate_main("history", "import", str(path), "--db", "sqlite:///h.db", cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stderr.startswith(f"perfgate: error: {path}: line 2: not a run as perfgate"), (
        done.stderr
    )
    assert problem in done.stderr, done.stderr
    assert not (tmp_path / "h.db").exists()


def test_a_pipe_or_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    """A named pipe nobody writes to kept the import waiting for ever, /dev/zero filled the
    memory. Should the pipe be opened after all, a writer ends the wait (and the test fails)."""
    pipe = tmp_path / "runs.jsonl"
    os.mkfifo(pipe)
    threading.Thread(target=_unblock, args=(pipe,), daemon=True).start()
    for given in (pipe, Path("/dev/null"), tmp_path):
        done = perfgate_main(
            "history", "import", str(given), "--db", "sqlite:///h.db", cwd=tmp_path
        )
        assert done.returncode == 64, done.stdout + done.stderr
        assert done.stderr.startswith(f"perfgate: error: {given}: is not a file"), done.stderr
    assert not (tmp_path / "h.db").exists()


def _unblock(pipe: Path) -> None:
    """Open `pipe` for writing as soon as a reader has, and close it: the reader sees its end."""
    for _ in range(200):
        try:
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError:  # no reader yet
            time.sleep(0.05)
