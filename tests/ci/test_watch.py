"""The nightly watch: a step in a trend found, its issue opened, updated and closed.

The plan comes from a real SQLite history of trend runs on main (the step planted in the
recorded numbers); the nightly workflow's issue job then runs as the runner would, with its
`python3 -m perfgate ci watch --apply` step, against the fake `gh` the comment step's test
uses: each plan opens, updates or closes the issue it should.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from perfgate.ci.issues import BOT, LABEL, WatchKey, apply_plan, key_of, marker
from perfgate.errors import ExitCode
from perfgate.results import RunContext
from perfgate.store import close_history, open_history, record_run

from ..conftest import REPO, write_config
from ..factories import measurement, record
from ..in_process import perfgate_main
from . import fake_gh
from .conftest import load_workflow
from .job_runner import JobRunner

# Default tolerances (3%): the tiny scenario's 60% suit live CPU runs, not these numbers.
CONFIG = """
[perfgate]
default_scenarios = ["tiny"]
history = "sqlite:///history.db"

[scenarios.tiny]
engine = "embedded"
model = "perfgate/llama-tiny"
draft = "perfgate/eagle3-llama-tiny"
device = "cpu"
gated = ["output_tok_s", "verify_ms", "accept_length"]
"""
START = datetime(2026, 11, 1, 3, 17, tzinfo=UTC)


def commit(index: int) -> str:
    return f"{index:04x}" * 10


def add_trend(project: Path, levels: list[tuple[float, float]], first: int = 0) -> None:
    """Record a trend run per (tok/s, verify ms) on main, one a night, each its own commit."""
    sessions = open_history(f"sqlite:///{project / 'history.db'}")
    try:
        with sessions.begin() as session:
            for offset, (tok_s, verify_ms) in enumerate(levels):
                night = first + offset
                wobble = 1 + 0.004 * ((night * 3) % 5 - 2)  # launches land apart a little
                m = measurement(
                    "tiny",
                    spec_tok_s=tok_s * wobble,
                    verify_ms=verify_ms * wobble,
                    started=START + timedelta(days=night),
                )
                run = record(replace(m, profile="h200x8"), commit=commit(night))
                record_run(
                    session, replace(run, verdicts=(), context=RunContext(commit(night), "main"))
                )
            pr_run = record(replace(measurement("tiny", spec_tok_s=1.0), profile="h200x8"))
            context = RunContext(commit(999), "main", pr="12")  # a pull request's: not trend
            record_run(session, replace(pr_run, verdicts=(), context=context))
    finally:
        close_history(sessions)


def plan(project: Path, name: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    out = project / f"{name}.json"
    done = perfgate_main(
        "ci", "watch", "--out", str(out), "--profile", "h200x8",
        "--repo-url", "https://github.com/acme/gate", cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_config(tmp_path, CONFIG)
    return tmp_path


def test_a_step_in_the_trend_plans_an_issue_that_says_where_and_what(project: Path) -> None:
    add_trend(project, [(120.0, 5.0)] * 8 + [(90.0, 7.0)] * 5)  # night 8: tok/s -25%
    found, text = plan(project, "night-13")
    by_metric = {e["key"]["metric"]: e for e in found["watched"]}
    assert sorted(by_metric) == ["accept_length", "output_tok_s", "verify_ms"]
    assert "close_comment" in by_metric["accept_length"]  # flat: nothing stands
    issue = by_metric["output_tok_s"]["issue"]
    title = f"perfgate: output_tok_s of tiny on h200x8 fell 24.9% at {commit(8)[:10]}"
    assert issue["title"] == title  # 25% planted; the nights wobble by up to 0.8%
    body = issue["body"]
    assert key_of(body) == WatchKey("tiny", "h200x8", "output_tok_s")
    # Each run's point is its middle repeat (1% above the level it was recorded at).
    assert "from 121.1 to 90.9 tok/s (-24.9%; the tolerance is 3%)" in body
    assert f"| last run before the step | #8 | [`{commit(7)[:10]}`]" in body
    assert f"| first run after it | #9 | [`{commit(8)[:10]}`]" in body
    assert f"https://github.com/acme/gate/compare/{commit(7)}...{commit(8)}" in body
    assert "The phase that moved most: **verify**, 4.995 -> 7.000 ms per cycle" in body
    bisect = f"perfgate bisect --scenario tiny --good {commit(7)[:12]} --bad {commit(8)[:12]}"
    assert f"```sh\n{bisect}\n```" in body
    assert by_metric["verify_ms"]["issue"]["title"].startswith("perfgate: verify_ms of tiny")
    assert "- output_tok_s of tiny on h200x8: standing step: perfgate: output_tok_s" in text


def test_a_step_that_goes_back_plans_the_closing(project: Path) -> None:
    add_trend(project, [(120.0, 5.0)] * 8 + [(90.0, 7.0)] * 5 + [(119.0, 5.0)] * 5)
    found, text = plan(project, "night-18")
    assert all("issue" not in e for e in found["watched"]), text
    comment = {e["key"]["metric"]: e["close_comment"] for e in found["watched"]}["output_tok_s"]
    assert comment.startswith("The step went back: output_tok_s of `tiny` on `h200x8`")
    assert "as of run #18" in comment  # the pull request's run (#19) is no trend run


def test_a_short_trend_is_not_watched(project: Path) -> None:
    add_trend(project, [(120.0, 5.0)] * 3 + [(60.0, 9.0)] * 2)
    found, text = plan(project, "short")
    assert found["watched"] == []
    assert "not watched: 5 trend runs, fewer than 6" in text


def _issue_job(temp: Path, plan_file: Path, gh_env: dict[str, str]) -> str:
    """Run the nightly workflow's issue job: the plan where the download step leaves it."""
    job = load_workflow("nightly.yml")["jobs"]["issues"]
    (temp / "perfgate-watch").mkdir(parents=True, exist_ok=True)
    (temp / "perfgate-watch" / "watch.json").write_text(plan_file.read_text())
    environ = {
        "PATH": gh_env["PATH"],
        "HOME": str(temp),
        "GITHUB_REPOSITORY": "acme/gate",
        "FAKE_GH_STATE": gh_env["FAKE_GH_STATE"],
    }
    expressions = {"runner.temp": str(temp), "github.token": "test-token"}
    conditions = {"steps.plan.outcome == 'success'": True}
    runner = JobRunner(REPO, temp, environ, expressions, conditions)
    (step,) = [s for s in runner.run_job(job) if s.name == "Open, update or close the issues"]
    assert step.returncode == 0, step.output
    return step.output


@pytest.mark.slow
def test_the_nightly_issue_job_opens_updates_and_closes_one_issue(
    project: Path, tmp_path: Path
) -> None:
    human = {  # someone quoting the marker: never touched
        "number": 1, "title": "a question", "body": marker(WatchKey("tiny", "h200x8", "output_tok_s")),
        "state": "open", "labels": [{"name": LABEL}], "user": {"login": "alice"},
    }  # fmt: skip
    gh_env = fake_gh.install(tmp_path / "gh", [], issues=[human])
    add_trend(project, [(120.0, 5.0)] * 8 + [(90.0, 7.0)] * 3)
    plan(project, "night-11")
    opened = _issue_job(tmp_path / "n11", project / "night-11.json", gh_env)
    assert "opened #2: perfgate: output_tok_s of tiny on h200x8 fell" in opened
    assert "opened #3: perfgate: verify_ms of tiny on h200x8 rose" in opened

    add_trend(project, [(90.0, 7.0)] * 3, first=11)  # two more nights at the new level
    plan(project, "night-14")
    updated = _issue_job(tmp_path / "n14", project / "night-14.json", gh_env)
    assert "updated #2:" in updated and "updated #3:" in updated and "opened" not in updated

    add_trend(project, [(120.0, 5.0)] * 5, first=14)  # the fix lands: back to 120
    plan(project, "night-19")
    closed = _issue_job(tmp_path / "n19", project / "night-19.json", gh_env)
    assert "closed #2: the step of output_tok_s of tiny on h200x8 went back" in closed
    assert "closed #3:" in closed

    issues = {i["number"]: i for i in fake_gh.issues(gh_env)}
    assert issues[1] == human
    assert [issues[n]["state"] for n in (2, 3)] == ["closed", "closed"]
    assert issues[2]["user"]["login"] == BOT and issues[2]["labels"] == [{"name": LABEL}]
    assert "6 runs at the new level" in issues[2]["body"]  # the update's figures
    comments = [c for c in fake_gh.comments(gh_env) if c["issue"] == 2]
    assert len(comments) == 1 and comments[0]["body"].startswith("The step went back")


def test_applying_a_bad_plan_or_without_a_repository_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"schema": 1, "label": "x", "watched": [{"key": {"scenario": 1}}]}')
    done = perfgate_main("ci", "watch", "--apply", str(bad), "--repo", "a/b", cwd=tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT and "is not a watch plan" in done.stderr
    neither = perfgate_main("ci", "watch", cwd=tmp_path)
    assert neither.returncode == ExitCode.BAD_INPUT and "--out" in neither.stderr
    nowhere = perfgate_main("ci", "watch", "--apply", str(bad), cwd=tmp_path)
    assert nowhere.returncode == ExitCode.BAD_INPUT


def test_a_failing_gh_is_an_infrastructure_failure(tmp_path: Path) -> None:
    def gh(args, body):  # type: ignore[no-untyped-def]
        from perfgate.errors import InfrastructureError

        raise InfrastructureError("gh api repos/a/b/issues failed: HTTP 502")

    with pytest.raises(Exception, match="HTTP 502") as raised:
        apply_plan({"label": LABEL, "watched": []}, "a/b", gh)
    assert raised.value.exit_code == ExitCode.INFRASTRUCTURE  # type: ignore[attr-defined]


def test_applying_a_plan_needs_only_the_standard_library() -> None:
    """The issue job runs perfgate from its checkout with a bare python3: no dependency."""
    script = (
        "import sys; sys.argv = ['perfgate', 'ci', 'watch', '--help']\n"
        "import perfgate.commands.ci, perfgate.ci.issues, perfgate.cli\n"
        "outside = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(sorted(outside - {'perfgate', '__main__'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n" + script],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (("--out", ""), "--out: is empty: it names no file; give --out a file's path"),
        (("--out", "p.json", "--summary", "nodir/s.md"), "nodir: no such folder, so --summary"),
    ],
)
def test_a_plan_or_summary_path_that_cannot_be_written_is_refused_before_reading(
    project: Path, flags: tuple[str, ...], problem: str
) -> None:
    done = perfgate_main("ci", "watch", *flags, cwd=project)
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert done.stderr.startswith(f"perfgate: error: {problem}") and done.stdout == ""
    assert sorted(p.name for p in project.iterdir()) == ["perfgate.toml"]
