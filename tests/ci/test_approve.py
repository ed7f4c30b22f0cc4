"""`perfgate ci approve`: runs by id or the newest pushed run on main, through baseline update."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from perfgate.results import RunContext
from perfgate.store import open_history, record_run

from ..conftest import write_config
from ..factories import measurement, record
from ..in_process import perfgate_main


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
    return perfgate_main(
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
    assert bad.returncode == 64 and "--runs: 'one' is not a run id: a whole number" in bad.stderr
    huge = _approve(tmp_path, "--runs", "1 99999999999999999999999")
    assert huge.returncode == 64, huge.stderr
    assert (
        "--runs: '99999999999999999999999' is not a run id: a whole number from 1 to "
        "9223372036854775807, the largest the history stores; give run ids" in huge.stderr
    )
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
    result = perfgate_main(
        "ci", "approve", "--runs", "1", "--approved-by", "bob" + HOSTILE,
        "--reason", "faster\n# kernel " + HOSTILE, "--body", "body.md", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = (tmp_path / "body.md").read_text()
    shown = _outside_code(body)
    for raw in ("@", "<img", "![", "https://evil", "\n# kernel"):
        assert raw not in shown, (raw, body)
    assert "`https://ci.example/runs/1) ![x](https://evil.example/x.png`" in body


def _approval(login: str, state: str = "approved", environment: str = "baseline-approval") -> dict:  # type: ignore[type-arg]
    # One entry of GET /repos/{owner}/{repo}/actions/runs/{run_id}/approvals.
    return {
        "environments": [{"id": 1, "name": environment}],
        "state": state,
        "comment": "",
        "user": {"login": login, "type": "User"},
    }


def _approve_reviewed(folder: Path, approvals: list, *requesters: str):  # type: ignore[no-untyped-def, type-arg]
    flags = [arg for name in requesters for arg in ("--requested-by", name)]
    return perfgate_main(
        "ci", "approve", "--runs", "1", "--approvals", json.dumps(approvals), *flags,
        "--reason", "new kernel", "--body", "body.md", cwd=folder,
    )  # fmt: skip


def test_the_reviewer_who_approved_the_deployment_is_recorded(tmp_path: Path) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    approvals = [
        _approval("carol", "rejected"),
        _approval("bob"),
        _approval("dave", environment="x"),
    ]
    result = _approve_reviewed(tmp_path, approvals, "alice")
    assert result.returncode == 0, result.stderr
    baseline = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert baseline["runs"][0]["approved_by"] == "bob"
    assert (
        (tmp_path / "body.md")
        .read_text()
        .startswith("Baseline update approved by `bob`, requested by `alice`: `new kernel`")
    )


@pytest.mark.parametrize(
    ("approvals", "expected"),
    [
        (
            [_approval("alice")],
            "--approvals: approved only by alice, who started the update; another reviewer of "
            "the baseline-approval environment must approve",
        ),
        ([_approval("Alice"), _approval("ALICE")], "approved only by Alice, ALICE"),
        ([], "--approvals: no reviewer approved the baseline-approval environment"),
        ([_approval("bob", "rejected")], "no reviewer approved"),
        ("not json", "--approvals: is not the JSON list"),
    ],
    ids=["self", "self-any-case", "none", "rejected", "garbage"],
)
def test_a_deployment_its_requester_approved_alone_is_refused(
    tmp_path: Path, approvals: object, expected: str
) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    flags = ["--approvals", approvals if isinstance(approvals, str) else json.dumps(approvals)]
    result = perfgate_main(
        "ci", "approve", "--runs", "1", *flags, "--requested-by", "alice",
        "--requested-by", "alice-rerun", "--reason", "r", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 64, result.stdout + result.stderr
    assert expected in result.stderr
    assert not (tmp_path / "baselines").exists()


def test_approved_by_or_approvals_one_of_them(tmp_path: Path) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    both = _approve(tmp_path, "--runs", "1", "--approvals", "[]", "--requested-by", "x")
    assert both.returncode == 64 and "--approved-by" in both.stderr
    neither = perfgate_main("ci", "approve", "--runs", "1", "--reason", "r", cwd=tmp_path)
    assert neither.returncode == 64 and "--approved-by" in neither.stderr
    lonely = perfgate_main(
        "ci", "approve", "--runs", "1", "--approvals", "[]", "--reason", "r", cwd=tmp_path
    )
    assert lonely.returncode == 64 and "--requested-by" in lonely.stderr


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (("--body", "perfgate.toml/body.md"), "perfgate.toml: is a file, so --body perfgate.toml"),
        (("--baselines", "perfgate.toml"), "perfgate.toml: is a file, not a folder --baselines"),
    ],
)
def test_a_body_or_baselines_path_that_cannot_be_written_is_refused_before_approving(
    tmp_path: Path, flags: tuple[str, ...], problem: str
) -> None:
    write_config(tmp_path)
    _history(tmp_path)
    done = _approve(tmp_path, "--runs", "1", *flags)
    assert done.returncode == 64, done.stderr
    assert done.stderr.startswith(f"perfgate: error: {problem}")
    assert not (tmp_path / "baselines").exists() and (tmp_path / "perfgate.toml").is_file()
