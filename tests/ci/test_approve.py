"""`perfgate ci approve`: runs by id or the newest pushed run on main, through baseline update."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from perfgate.results import RunContext
from perfgate.store import open_history, record_run

from ..conftest import run_perfgate, write_config
from ..factories import measurement, record


def _history(folder: Path) -> None:
    """Runs of `tiny`: #1 pushed to main, #2 a pull request from a branch named main, #3 a PR."""
    sessions = open_history(f"sqlite:///{folder / 'history.db'}")
    contexts = [
        RunContext(commit="a" * 40, branch="main", ci_url="https://ci/runs/1"),
        RunContext(commit="b" * 40, branch="main", pr="9"),
        RunContext(commit="c" * 40, branch="feature", pr="7"),
    ]
    with sessions.begin() as session:
        for day, context in enumerate(contexts, start=1):
            started = datetime(2026, 11, day, tzinfo=UTC)
            record_run(
                session, replace(record(measurement("tiny", started=started)), context=context)
            )


def _approve(folder: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_perfgate(
        "ci", "approve", "--approved-by", "alice", "--reason", "new kernel", *args, cwd=folder
    )


def test_latest_takes_the_newest_run_pushed_to_main(tmp_path: Path) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    result = _approve(tmp_path, "--runs", "latest", "--profile", "cpu", "--body", "body.md")
    assert result.returncode == 0, result.stderr
    baseline = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert [run["run_id"] for run in baseline["runs"]] == [1]
    assert baseline["runs"][0]["approved_by"] == "alice"
    body = (tmp_path / "body.md").read_text()
    assert body.startswith("Baseline update approved by `alice`: `new kernel`")
    assert "### tiny on cpu: run #1" in body and "[CI run](https://ci/runs/1)" in body


def test_runs_by_id_and_what_is_refused(tmp_path: Path) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    assert _approve(tmp_path, "--runs", "1, 3").returncode == 0
    baseline = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert [run["run_id"] for run in baseline["runs"]] == [1, 3]
    bad = _approve(tmp_path, "--runs", "one")
    assert bad.returncode == 64 and "--runs: is 'one'; give run ids" in bad.stderr
    missing = _approve(tmp_path, "--runs", "latest", "--branch", "release", "--profile", "cpu")
    assert missing.returncode == 64
    assert (
        "no run of scenario 'tiny' on profile 'cpu' was recorded by a push to 'release'"
        in missing.stderr
    )


HOSTILE = "@acme/everyone <img src=x onerror=alert(1)> ![pixel](https://evil.example/p.png) `x`"


def _outside_code(text: str) -> str:
    """`text` without its code spans (GitHub renders nothing inside them: no mention, no HTML)."""
    import re

    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text)


def test_the_body_renders_what_it_was_given_as_text(tmp_path: Path) -> None:
    write_config(tmp_path)
    sessions = open_history(f"sqlite:///{tmp_path / 'history.db'}")
    context = RunContext(
        commit="a" * 40,
        branch="feat" + HOSTILE,
        ci_url="https://ci.example/runs/1) ![x](https://evil.example/x.png",
    )
    with sessions.begin() as session:
        record_run(session, replace(record(measurement("tiny")), context=context))
    result = run_perfgate(
        "ci", "approve", "--runs", "1", "--approved-by", "bob" + HOSTILE,
        "--reason", "faster\n# kernel " + HOSTILE, "--body", "body.md", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = (tmp_path / "body.md").read_text()
    shown = _outside_code(body)
    for raw in ("@", "<img", "![", "https://evil", "\n# kernel"):
        assert raw not in shown, (raw, body)
    assert "`https://ci.example/runs/1) ![x](https://evil.example/x.png`" in body
