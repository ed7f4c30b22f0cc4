"""The bisect's driver over a real git history, with a stand-in for the servers.

Each commit of the test repository holds `speed.txt`, the speculative server's tok/s at that
commit; the stand-in server reads it from the worktree its commit was checked out to (the
folder beside the interpreter the bisect wrote for it), so what is measured is what the
commit's checkout holds. The rest is real: git worktrees, the preflight, the gate's
statistics, the history (SQLite) and the resume from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.bisect.git import commit_range, resolve_commit
from perfgate.bisect.outcome import BISECT_KEY, BisectResult
from perfgate.bisect.render import outcome_lines
from perfgate.bisect.run import BisectRunner, BisectSpec
from perfgate.bisect.search import Likeness
from perfgate.config import Scenario, load_config
from perfgate.errors import ConfigError, ExitCode, InfrastructureError
from perfgate.report.chart_data import bisects_of
from perfgate.results import ModeResult, RunContext, RunRecord
from perfgate.store import close_history, list_runs, open_history
from perfgate.store.columns import columns_from_records, history_columns

from ..conftest import write_config
from ..factories import mode_result
from ..in_process import perfgate_main
from .repository import git

PLAIN_TOK_S = 100.0


def make_speed_repository(folder: Path, speeds: list[float | str]) -> list[str]:
    """A repository whose commit i holds `speeds[i]` in speed.txt (a tok/s, "noisy" after
    it for repeats that scatter by 15%); its commit ids."""
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    for index, speed in enumerate(speeds):
        (folder / "speed.txt").write_text(f"{speed}\n")
        (folder / "notes.txt").write_text(f"commit {index}\n")
        git(folder, "add", "speed.txt", "notes.txt")
        git(folder, "commit", "-q", "-m", f"commit {index}")
    return git(folder, "rev-list", "--reverse", "HEAD").split()


class CommitServers:
    """Answers measure_mode's calls with tok/s read from the commit's checkout.

    Successive runs scatter by a few tenths of a percent (the spread between launches the
    gate needs to see); `fail` makes a commit's servers fail; `stop_after` raises
    KeyboardInterrupt as that many servers have started (an interrupted bisect).
    """

    def __init__(
        self, fail: Callable[[float], bool] | None = None, stop_after: int | None = None
    ) -> None:
        self.fail = fail or (lambda speed: False)
        self.stop_after = stop_after
        self.launches: list[tuple[str, float]] = []

    def __call__(self, scenario: Scenario, mode: str, folder: Path, **_: Any) -> ModeResult:
        assert scenario.python is not None
        interpreter = Path(scenario.python)
        tree = interpreter.parent / interpreter.name.removesuffix("-python")
        speed_text, *noisy = (tree / "speed.txt").read_text().split()
        speed = float(speed_text)
        if self.stop_after is not None and len(self.launches) >= self.stop_after:
            raise KeyboardInterrupt
        self.launches.append((mode, speed))
        if self.fail(speed):
            raise InfrastructureError(f"the {mode} server exited")
        jitter = 1.0 + 0.003 * ((len(self.launches) * 7) % 5 - 2)
        tok_s = (PLAIN_TOK_S if mode == "plain" else speed) * jitter
        result = mode_result(mode, tok_s, repeats=3)
        spread = 0.15 if noisy and mode == "spec" else 0.002
        repeats = tuple(tok_s * (1 + spread * k) for k in (-1, 0, 1))
        return replace(result, samples={**result.samples, "output_tok_s": repeats})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    config = write_config(tmp_path)
    return config


def bisect(
    project: Path,
    repo: Path,
    ends: tuple[str, str],
    servers: CommitServers,
    *,
    name: str = "tiny-bisect",
) -> tuple[BisectResult, list[str]]:
    config = load_config(project)
    # The tiny scenario's 60% tolerances suit a noisy CPU; these servers are clean.
    tolerances = {"output_tok_s": 0.05, "speedup": 0.05, "accept_length": 0.05, "verify_ms": 0.05}
    scenario = replace(config.scenarios["tiny"], tolerances=tolerances)
    good, bad = (resolve_commit(repo, rev, "--good") for rev in ends)
    spec = BisectSpec(scenario, name, repo, tuple(commit_range(repo, good, bad)))
    lines: list[str] = []
    runner = BisectRunner(
        spec=spec,
        profile="cpu",
        history_url=config.history_url,
        workdir=project.parent / "work",
        context=RunContext(commit="head", branch="main", ci_url="https://ci.invalid/1"),
        alpha=config.alpha,
        config_file=project,
        measure=servers,
        say=lines.append,
    )
    result = runner.run()
    return result, lines + outcome_lines(result, "perfgate bisect ...")


def recorded(project: Path) -> list[RunRecord]:
    sessions = open_history(load_config(project).history_url)
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


def worktrees(repo: Path) -> list[str]:
    return [
        line for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]  # fmt: skip


SLOW_AT_5 = [200.0] * 5 + [20.0] * 4  # commits 0-4 fast, 5-8 ten times slower


def test_the_commit_that_slowed_the_scenario_is_named(project: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ids = make_speed_repository(repo, SLOW_AT_5)
    (repo / "speed.txt").write_text("uncommitted\n")  # the user's own work in progress
    before = (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"))
    servers = CommitServers()
    result, lines = bisect(project, repo, (ids[0], ids[-1]), servers)
    assert result.named is not None and result.named.sha == ids[5]
    assert result.exit_code() is ExitCode.PASS
    assert result.metrics == ("output_tok_s", "speedup")  # what the bad end regressed in
    # ceil(log2(8)) = 3 commits between the ends, each decided at its first run.
    assert [c.index for c in result.steps] == [4, 6, 5]
    assert [len(c.records) for c in (result.good, result.bad, *result.steps)] == [3, 1, 1, 1, 1]
    assert len(servers.launches) == 2 * 7
    assert any(line.startswith("Found: " + ids[5][:10]) for line in lines), lines
    assert "measured 5 commits (7 runs, 0 reused from the history) of 9" in lines[-1]
    # The user's tree, branch and work in progress are as they were; no worktree is left.
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == before
    assert (repo / "speed.txt").read_text() == "uncommitted\n"
    assert git(repo, "branch", "--list") == "* main"
    assert worktrees(repo) == [f"worktree {repo}"]
    # Every run is recorded with its commit, the bisect's tag and its verdicts.
    runs = recorded(project)
    assert [r.context.commit for r in runs] == [ids[0]] * 3 + [ids[8], ids[4], ids[6], ids[5]]
    assert {r.measurement.scenario for r in runs} == {"tiny-bisect"}
    tags = [r.measurement.config[BISECT_KEY] for r in runs]
    assert {t["id"] for t in tags} == {result.id}
    assert [t["index"] for t in tags] == [0, 0, 0, 8, 4, 6, 5]
    assert all(
        r.context.branch is None and r.context.ci_url == "https://ci.invalid/1" for r in runs
    )
    assert [r.verdicts for r in runs[:3]] == [(), (), ()]  # the good end is the reference
    assert [r.status.value for r in runs[3:]] == ["regression", "pass", "regression", "regression"]
    assert all("the good end" in (r.judged_against or "") for r in runs[3:])


def test_a_commit_slower_but_nearer_the_good_end_stops_the_bisect_between_the_ends(
    project: Path, tmp_path: Path
) -> None:
    """Commit 4 is 25% slower than the good end (a regression at 5%), the bad end ten times
    slower: commit 4 is nearer the good end, so it is not taken for the step (a machine's
    load can slow a commit that much); the bisect says so and names no commit."""
    ids = make_speed_repository(tmp_path / "repo", [200.0] * 4 + [150.0] + [20.0] * 4)
    result, lines = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), CommitServers())
    assert result.outcome() == "undecided" and result.exit_code() is ExitCode.INCONCLUSIVE
    (stuck,) = result.steps
    assert stuck.index == 4 and stuck.likeness is Likeness.BETWEEN and result.named is None
    assert [v.status.value for v in stuck.verdicts] == ["regression"] * 2  # the gate's word
    (said,) = [line for line in lines if line.startswith("Cannot be told apart: " + ids[4][:10])]
    figures = (
        r"nearer it than the bad end \(output_tok_s -2\d\.\d% against the bad end's -(89|90)\.\d%"
    )
    assert re.search(figures, said), said
    # The report, reading the recorded verdicts, judges it by the same rule.
    (shown,) = bisects_of(columns_from_records(recorded(project)))
    assert [(c.index, c.likeness) for c in shown.commits][-2:] == [(4, "between"), (8, "like-bad")]
    assert shown.state.endswith(" is slower than the good end, nearer it than the bad end")


def test_a_commit_past_the_midpoint_is_like_bad(project: Path, tmp_path: Path) -> None:
    """Commit 5 is 6.7 times slower, the bad end ten times: nearer the bad end (the
    geometric midpoint is 3.2 times), so commit 5 is named."""
    ids = make_speed_repository(tmp_path / "repo", [200.0] * 5 + [30.0] + [20.0] * 3)
    result, _ = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), CommitServers())
    assert result.named is not None and result.named.sha == ids[5]
    assert result.by_index()[5].likeness is Likeness.BAD


def test_ends_that_are_not_told_apart_are_refused_with_the_figures(
    project: Path, tmp_path: Path
) -> None:
    ids = make_speed_repository(tmp_path / "repo", [200.0, 200.0, 201.0, 199.0, 200.0])
    servers = CommitServers()
    result, lines = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), servers)
    assert result.refused and result.named is None and not result.steps
    assert result.exit_code() is ExitCode.INCONCLUSIVE
    assert result.bad.likeness is Likeness.GOOD
    refusal = next(line for line in lines if line.startswith("Refused: "))
    assert "not told apart" in refusal and "output_tok_s pass" in refusal
    assert "interval" in refusal and "tolerance 5%" in refusal
    assert len(servers.launches) == 2 * 4  # the ends only


def test_an_interrupted_bisect_resumes_from_the_history(project: Path, tmp_path: Path) -> None:
    ids = make_speed_repository(tmp_path / "repo", SLOW_AT_5)
    ends = (ids[0], ids[-1])
    with pytest.raises(KeyboardInterrupt):  # stopped at the second server of commit 6
        bisect(project, tmp_path / "repo", ends, CommitServers(stop_after=2 * 5 + 1))
    assert worktrees(tmp_path / "repo") == [f"worktree {tmp_path / 'repo'}"]
    assert [r.context.commit for r in recorded(project)] == [ids[0]] * 3 + [ids[8], ids[4]]
    servers = CommitServers()
    result, lines = bisect(project, tmp_path / "repo", ends, servers)
    assert result.named is not None and result.named.sha == ids[5]
    assert [len(c.records) for c in (result.good, result.bad, *result.steps)] == [3, 1, 1, 1, 1]
    assert [c.reused for c in (result.good, result.bad, *result.steps)] == [3, 1, 1, 0, 0]
    assert len(servers.launches) == 2 * 2  # commits 6 and 5 only
    assert "measured 5 commits (7 runs, 5 reused from the history) of 9" in lines[-1]


def test_a_narrower_bisect_reuses_the_commits_measured_before(
    project: Path, tmp_path: Path
) -> None:
    ids = make_speed_repository(tmp_path / "repo", SLOW_AT_5)
    first, _ = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), CommitServers())
    servers = CommitServers()
    second, _ = bisect(project, tmp_path / "repo", (ids[0], ids[6]), servers)
    assert second.id != first.id
    assert second.named is not None and second.named.sha == ids[5]
    assert len(servers.launches) == 2 * 1  # only commit 3 is new: 0, 6, 5 were measured

    # The report shows the narrower bisect whole: the commits it judged from the first one's
    # runs too, where it recorded no run of its own.
    sessions = open_history(load_config(project).history_url)
    try:
        with sessions() as session:
            reported = {b.id: b for b in bisects_of(history_columns(session))}
    finally:
        close_history(sessions)
    narrower = reported[second.id]
    judged = sorted((second.good, second.bad, *second.steps), key=lambda c: c.index)
    assert [(c.index, c.commit, set(c.run_ids)) for c in narrower.commits] == [
        (c.index, c.commit.sha, set(c.run_ids)) for c in judged
    ]
    assert [c.likeness for c in narrower.commits] == [
        "good end",
        *(str(c.likeness) for c in judged[1:]),
    ]
    assert narrower.named == ids[5] and narrower.state.startswith(f"named {ids[5][:10]}")
    assert reported[first.id].named == ids[5]


def test_a_commit_that_fails_is_stepped_around(project: Path, tmp_path: Path) -> None:
    speeds: list[float | str] = [200.0, 200.0, 200.0, 200.0, 201.0, 200.0, 20.0, 20.0, 20.0]
    ids = make_speed_repository(tmp_path / "repo", speeds)
    servers = CommitServers(fail=lambda speed: speed == 201.0)  # commit 4 does not start
    result, lines = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), servers)
    assert [(c.index, c.likeness) for c in result.steps] == [
        (4, Likeness.FAILED),
        (3, Likeness.GOOD),
        (5, Likeness.GOOD),
        (6, Likeness.BAD),
    ]
    assert result.named is not None and result.named.sha == ids[6]
    assert any("failed (the spec server exited); stepped around" in line for line in lines)


def test_a_first_bad_commit_hidden_by_failures_leaves_the_range(
    project: Path, tmp_path: Path
) -> None:
    speeds: list[float | str] = [200.0, 200.0, 200.0, 200.0, 201.0] + [20.0] * 4
    ids = make_speed_repository(tmp_path / "repo", speeds)
    servers = CommitServers(fail=lambda speed: speed == 201.0)
    result, lines = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), servers)
    assert result.outcome() == "unmeasured" and result.exit_code() is ExitCode.INFRASTRUCTURE
    assert result.named is None and result.failed() == [4]
    expected = f"Not measured: the first commit like bad is one of {ids[3][:10]}..{ids[5][:10]}"
    assert any(line.startswith(expected) for line in lines), lines


def test_a_commit_between_that_stays_undecided_ends_the_bisect(
    project: Path, tmp_path: Path
) -> None:
    """Commit 4's repeats scatter by 15% around 5% slower: its interval stays across the
    tolerance at every look."""
    ids = make_speed_repository(tmp_path / "repo", [200.0] * 4 + ["190 noisy"] + [20.0] * 4)
    servers = CommitServers()
    result, lines = bisect(project, tmp_path / "repo", (ids[0], ids[-1]), servers)
    assert result.outcome() == "undecided" and result.exit_code() is ExitCode.INCONCLUSIVE
    (stuck,) = result.steps
    assert stuck.index == 4 and stuck.likeness is Likeness.UNDECIDED
    assert any(line.startswith("Cannot be told apart: " + ids[4][:10]) for line in lines)
    # The gate measured it again while another run could settle it, up to max_runs.
    assert 1 <= len(stuck.records) <= 3
    statuses = [r.verdicts for r in stuck.records]
    assert all(any(v.status.value == "inconclusive" for v in vs) for vs in statuses)


def test_runs_of_another_environment_are_refused(project: Path, tmp_path: Path) -> None:
    ids = make_speed_repository(tmp_path / "repo", SLOW_AT_5)
    ends = (ids[0], ids[-1])
    with pytest.raises(KeyboardInterrupt):
        bisect(project, tmp_path / "repo", ends, CommitServers(stop_after=2 * 3))
    history = load_config(project).history_url
    sessions = open_history(history)
    try:  # as if the good end's runs had been measured under another torch
        with sessions.begin() as session:
            from perfgate.store.models import RunRow

            for row in session.query(RunRow):
                row.fingerprint = {**row.fingerprint, "torch": "2.0.0"}
    finally:
        close_history(sessions)
    with pytest.raises(ConfigError, match=r"torch \(2\.0\.0 -> .*another --name"):
        bisect(project, tmp_path / "repo", ends, CommitServers())


def test_the_command_refuses_bad_input_before_measuring(project: Path, tmp_path: Path) -> None:
    ids = make_speed_repository(tmp_path / "repo", [200.0, 200.0, 20.0])
    repo = str(tmp_path / "repo")
    base = ["bisect", "--scenario", "tiny", "--repo", repo]
    cases = {
        ("--good", "nope", "--bad", ids[-1]): "--good: no commit 'nope'",
        ("--good", ids[-1], "--bad", ids[0]): "does not descend from",
        ("--good", ids[0], "--bad", ids[0]): "one commit",
        ("--good", ids[0], "--bad", ids[-1], "--source", "../x"): "--source: '../x'",
        ("--good", ids[0], "--bad", ids[-1], "--good-runs", "1"): "--good-runs: must be >= 2",
        ("--good", ids[0], "--bad", ids[-1], "--name", "tiny"): "--name: 'tiny' is a scenario",
        ("--good", ids[0], "--bad", ids[-1], "--json", "perfgate.toml/b.json"): (
            "perfgate.toml: is a file, so --json perfgate.toml/b.json cannot be created under it"
        ),
    }
    for flags, message in cases.items():
        done = perfgate_main(*base, *flags, cwd=project.parent)
        assert done.returncode == ExitCode.BAD_INPUT, (flags, done.stderr)
        assert message in done.stderr, (flags, done.stderr)
    not_a_repo = ["--repo", str(project.parent), "--good", "a", "--bad", "b"]
    outside = perfgate_main(*base[:3], *not_a_repo, cwd=project.parent)
    assert outside.returncode == ExitCode.BAD_INPUT
    assert "is not inside a git repository" in outside.stderr
    assert not (project.parent / "history.db").exists()  # nothing recorded, nothing created
