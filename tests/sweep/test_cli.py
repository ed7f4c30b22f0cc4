"""`perfgate sweep` as a user runs it: real servers on the default models, a real history."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.results import RunRecord
from perfgate.store import close_history, list_runs, open_history

from ..conftest import TINY_SCENARIO, write_config
from ..in_process import perfgate_main
from ..shortened_default import shortened_default


@pytest.fixture
def repo_config(tmp_path: Path) -> Path:
    """The repository's perfgate.toml, in a folder of its own (its runs and logs land there),
    the default scenario's requests cut from 64 new tokens to 16: a few decode cycles a point
    give its accept length and verify share, each token more costs the sweep's three servers."""
    return shortened_default(tmp_path, max_new_tokens=16)


def runs_in(db: Path) -> list[RunRecord]:
    sessions = open_history(f"sqlite:///{db}")
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


@pytest.mark.slow
def test_a_steps_sweep_of_the_default_scenario_is_recorded(repo_config: Path) -> None:
    folder = repo_config.parent
    done = perfgate_main(
        *("sweep", "--sweep", "default-steps", "--steps", "2-3", "--repeats", "2"),
        *("--db", "sqlite:///sweeps.db", "--json", "s.json", "--markdown", "s.md"),
        cwd=folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/2] steps=2 topk=1 draft_tokens=3: " in done.stderr
    assert "[2/2] steps=3 topk=1 draft_tokens=4: " in done.stderr
    assert "| steps | topk | draft tokens | tok/s |" in done.stdout
    # On a busy CPU the draft may cost more than it saves: then the best line says so.
    assert re.search(r"^Best: (none beats plain decoding \(fastest: )?steps=", done.stdout, re.M)
    document = json.loads((folder / "s.json").read_text())
    assert [(p["steps"], p["equivalent"], p["run"]) for p in document["points"]] == [
        (2, True, 1),
        (3, True, 2),
    ]
    assert all(p["accept_length"] > 1 and 0 < p["verify_share"] < 1 for p in document["points"])
    assert (folder / "s.md").read_text() in done.stdout
    runs = runs_in(folder / "sweeps.db")
    assert [r.measurement.scenario for r in runs] == ["default-steps"] * 2
    assert [r.measurement.config["steps"] for r in runs] == [2, 3]
    assert runs[1].measurement.plain.reused_from == runs[0].id
    assert runs[1].measurement.plain.samples == runs[0].measurement.plain.samples
    report = perfgate_main("report", "--db", "sqlite:///sweeps.db", "--out", "r.html", cwd=folder)
    assert (
        report.returncode == 0
        and '"sweeps":[{"name":"default-steps"' in (folder / "r.html").read_text()
    )


@pytest.mark.slow
def test_each_environment_point_reaches_its_servers(tmp_path: Path) -> None:
    write_config(tmp_path, TINY_SCENARIO)
    done = perfgate_main(
        *("sweep", "--scenario", "tiny", "--steps", "2", "--repeats", "1"),
        *("--env", "PERFGATE_SWEEP_PROBE=a,b", "--no-early-stop"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("plain twin (tiny-sweep · PERFGATE_SWEEP_PROBE=") == 2
    # Each server's start and repeats go to stderr, a line per step: stdout is the table.
    assert done.stderr.count("tiny-sweep: starting spec server\n") == 2
    assert done.stderr.count("tiny-sweep spec: repeat 1 of 1, ") == 2
    assert "\r" not in done.stderr and "starting" not in done.stdout
    runs = runs_in(tmp_path / "history.db")
    commands = [(r.measurement.plain.command, r.measurement.spec.command) for r in runs]
    assert [
        ("PERFGATE_SWEEP_PROBE=a" in p, "PERFGATE_SWEEP_PROBE=a" in s) for p, s in commands
    ] == [
        (True, True),
        (False, False),
    ]
    assert "PERFGATE_SWEEP_PROBE=b" in commands[1][1]
    assert [r.measurement.plain.reused_from for r in runs] == [None, None]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sweep", "nope"], "--sweep: unknown sweep 'nope'; choose one of: default-steps"),
        (["--scenario", "embedded-default"], "--steps: nothing to sweep"),
        (["--steps", "1-2", "--name", "embedded-default"], "--name: the sweep's name"),
        (["--steps", "x"], "--steps: 'x' is not a list of numbers"),
        (["--steps", "2", "--env", "NCCL_PROTO"], "--env: 'NCCL_PROTO' is not NAME=VALUE"),
        (["--sweep", "default-steps", "--scenario", "tiny"], "--scenario: sweep 'default-steps'"),
        (["--steps", "2", "--budget-s", "0"], "--budget-s: must be a finite number > 0"),
        (["--steps", "2", "--budget-s", "nan"], "--budget-s: must be a finite number > 0, not nan"),
        (["--steps", "2", "--topk", "2"], "no setting"),
        (
            ["--steps", "1", "--json", "perfgate.toml/x.json"],
            "perfgate.toml: is a file, so --json perfgate.toml/x.json cannot be created under it",
        ),
        (["--steps", "1", "--markdown", "."], ".: is a folder, but --markdown names a file"),
    ],
)
def test_bad_flags_are_refused_before_any_server_starts(
    repo_config: Path, flags: list[str], message: str
) -> None:
    done = perfgate_main("sweep", *flags, cwd=repo_config.parent)
    assert done.returncode == 64, done.stdout + done.stderr
    assert message in done.stderr
    assert not (repo_config.parent / ".perfgate" / "runs").exists()
    assert load_config(repo_config).sweeps  # the file is untouched
