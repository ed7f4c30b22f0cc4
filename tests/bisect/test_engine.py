"""`perfgate bisect` on the embedded engine, over a real git history with a planted slowdown.

The repository (tests/bisect/repository.py) is a copy of perfgate's package whose commit 3
of 4 makes verify sleep 200 ms a cycle: its servers are the commit's own code, reached by
the bisect's rule (the commit's top first on the servers' path). The bisect is interrupted
with Ctrl-C while its first commit between the ends is measured, and resumed; it steps once
to a commit like the good end and once to one like the bad end (tests/bisect/test_search.py
takes longer ranges through every path, without servers); then a range without the slowdown
is refused; the report shows both. One module: about eight measured runs of the tiny model,
each a server pair, three of them the good end's (fewer would leave the gate a single degree
of freedom for the spread between launches, and the commits between more runs to decide).

The load of a shared machine (its speed swings up to fivefold) must not decide the test: the
Ctrl-C comes while a measurement is under way that every bisect of this range makes (the
first step's), never as perfgate may be ending; the scenario's timing tolerances are the
widest the gate takes, the slowdown far beyond them (tests/bisect/repository.py), and a
commit the load slowed beyond them is still nearer the good end than the slowdown (the
bisect calls it between the ends, not like bad); where the runs of the same code scatter
all the same, an undecided outcome passes, never a wrong commit. In the range without the
slowdown, a bad end whose runs the load slowed beyond the widest tolerance (the good end's
code, twice as slow) shows a regression, and the gate must say that it saw one.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.errors import ExitCode
from perfgate.store import close_history, list_runs, open_history

from ..conftest import run_perfgate_while, write_config
from ..in_process import perfgate_main
from .repository import BISECT_SCENARIO, git, make_repository

pytestmark = pytest.mark.slow

COMMITS = 4  # after the good end: ceil(log2(4)) = 2 steps between the ends
SLOW_AT = 3


def _interrupted_at(project: Path, argv: list[str], *lines: str) -> tuple[int, str]:
    """Run `perfgate ARGV`; send SIGINT (as a terminal's Ctrl-C) once `lines` show in its
    output, each after the one before. The last must be printed while perfgate has work
    ahead of it: a Ctrl-C that comes too late fails the test, saying so."""
    ended: list[int] = []

    @contextmanager
    def ctrl_c(process: subprocess.Popen[bytes]) -> Iterator[None]:
        code = process.poll()
        if code is None:
            process.send_signal(signal.SIGINT)
        else:
            ended.append(code)
        yield

    code, output = run_perfgate_while(project, argv, lines, ctrl_c)
    if ended:
        pytest.fail(
            f"perfgate had ended (exit code {ended[0]}) before Ctrl-C could be sent, once "
            f"{lines!r} showed: the Ctrl-C must come while a measurement is under way\n{output}"
        )
    if code == -signal.SIGINT:
        pytest.fail(
            "Ctrl-C reached perfgate as it was ending, after its command had returned (so "
            f"the signal itself ended it, exit code {code}), once {lines!r} showed: the "
            f"Ctrl-C must come while a measurement is under way\n{output}"
        )
    return code, output


def test_the_planted_slowdown_is_found_resumed_and_told_from_noise(tmp_path: Path) -> None:
    repo, project = tmp_path / "repo", tmp_path / "project"
    ids = make_repository(repo, COMMITS, slow_at=SLOW_AT)
    bad = ids[COMMITS]
    project.mkdir()
    write_config(project, BISECT_SCENARIO)
    argv = ["bisect", "--scenario", "tiny", "--repo", str(repo), "--good", ids[0], "--bad", bad]

    # Ctrl-C while the first commit between the ends (2) is measured: once the bad end is
    # judged (its line said), its spec server starts. Whatever the load, every bisect of
    # this range measures commit 2, and for seconds after that line (the server's start, its
    # repeats, then its plain twin's launch): perfgate is surely still at work. Nothing is
    # left behind. (Sent as the server starts, not once it measures: its start, most of a
    # run's CPU, is not spent only to be thrown away.)
    measuring_2 = (f"bad   {bad[:10]} ", "tiny-bisect: starting spec server")
    code, output = _interrupted_at(project, argv, *measuring_2)
    assert code == 130, output
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == "" and git(repo, "rev-parse", "HEAD") == bad
    before = _runs(project)
    # The good end's 3 runs, the bad end's: one, or more where the gate asked for another
    # (a verdict inconclusive while this machine's load swings); none of commit 2's.
    recorded = [r.context.commit for r in before]
    assert recorded[:3] == [ids[0]] * 3, output
    assert recorded[3:] == [bad] * len(recorded[3:]) and 1 <= len(recorded[3:]) <= 3, output

    # The same command resumes: the runs recorded are reused, the commit is found.
    done = perfgate_main(*argv, "--json", "bisect.json", cwd=project)
    found = json.loads((project / "bisect.json").read_text())
    runs = _runs(project)
    assert [r.id for r in runs[: len(before)]] == [r.id for r in before]  # nothing lost
    _check_extra_runs_only_where_asked(runs, ids[0])
    measured = {m["index"]: m for m in found["measured"]}
    assert [measured[i]["reused"] for i in (0, COMMITS)] == [3, recorded.count(bad)]
    if done.returncode == ExitCode.INCONCLUSIVE and _load_swung(project, ids[:SLOW_AT]):
        # This machine's load scattered the runs of the same code (the commits before the
        # slowdown) beyond what the tolerance lets the gate call like good: it says so, and
        # names no commit, never a wrong one.
        # A commit the load slowed beyond the tolerance is between the ends (nearer the good
        # one than the planted slowdown), or undecided.
        assert found["outcome"] == "undecided" and found["named"] is None, done.stdout
        low, high = (ids.index(sha) for sha in found["range"])
        assert low < SLOW_AT <= high and "Cannot be told apart: " in done.stdout
        stopped = found["measured"][-1]["likeness"]
        assert stopped in ("undecided", "between"), done.stdout
        named = None
    else:
        assert done.returncode == ExitCode.PASS, done.stdout + done.stderr
        assert found["named"] == ids[SLOW_AT], done.stdout
        assert f"Found: {ids[SLOW_AT][:10]} 'change {SLOW_AT}: verify sleeps'" in done.stdout
        assert "verify_ms regression" in done.stdout.split("Found: ")[1]  # the phase that moved
        # ceil(log2(4)) = 2 commits between the ends, plus the two ends.
        assert sorted(measured) == [0, 2, 3, COMMITS]
        assert [measured[i]["reused"] for i in (2, 3)] == [0, 0]
        assert [measured[i]["likeness"] for i in (COMMITS, 2, 3)] == [
            "like-bad",
            "like-good",
            "like-bad",
        ]
        named = ids[SLOW_AT]

    # A range without the slowdown: the ends are not told apart, the figures say why. Its bad
    # end, commit 1 (the good end's code), was measured by no bisect before: it runs afresh.
    quiet = ["bisect", "--scenario", "tiny", "--repo", str(repo), "--good", ids[0]]
    refused = perfgate_main(*quiet, "--bad", ids[1], cwd=project)
    assert "3 reused from the history" in refused.stdout  # the good end's runs
    swung = refused.returncode != ExitCode.INCONCLUSIVE and _load_swung(project, [ids[0], ids[1]])
    if swung:
        # This machine's load slowed the bad end's runs (the good end's code) beyond the
        # widest tolerance the gate takes: the gate said what the runs showed, a regression.
        bad_line = next(line for line in refused.stdout.splitlines() if line.startswith("bad "))
        assert "like-bad: " in bad_line and "regression" in bad_line, refused.stdout
    else:
        assert refused.returncode == ExitCode.INCONCLUSIVE, refused.stdout + refused.stderr
        assert f"Refused: {ids[0][:10]} (good) and {ids[1][:10]} (bad) are not told apart" in (
            refused.stdout
        )
        # Under load the bad end may even look faster: anything but a regression is "not told
        # apart".
        assert re.search(r"output_tok_s (pass|inconclusive|improvement)", refused.stdout), (
            refused.stdout
        )

    # The report shows both bisects, with the named commit (or where the first one stopped).
    report = perfgate_main("report", "--out", "report.html", cwd=project)
    assert report.returncode == 0, report.stderr
    html = (project / "report.html").read_text()
    assert html.count("bisect-state") == 2
    if named is not None:
        assert f"named {named[:10]}: the first commit like bad" in html
    else:
        said = {"undecided": "is undecided", "between": "nearer it than the bad end"}[stopped]
        assert said in html
    assert swung or "refused: the bad end" in html


def _runs(project: Path) -> list:  # type: ignore[type-arg]
    sessions = open_history(load_config(project / "perfgate.toml").history_url)
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


def _load_swung(project: Path, same_code: list[str]) -> bool:
    """Whether the runs of `same_code` (commits whose engine code is the good end's) lie more
    than 30% apart in tok/s or in verify_ms, run median against run median (within 15% on a
    quiet machine): the load of a machine shared with other work swung between launches.
    verify_ms, a few ms a cycle, swings most: twofold while tok/s moves 10%."""
    runs = [r for r in _runs(project) if r.context.commit in same_code]
    for metric in ("output_tok_s", "verify_ms"):
        medians = [statistics.median(r.measurement.spec.samples[metric]) for r in runs]
        if len(medians) > 1 and max(medians) > 1.3 * min(medians):
            return True
    return False


def _check_extra_runs_only_where_asked(runs: list, good: str) -> None:  # type: ignore[type-arg]
    """Each commit's runs beyond its first follow a run whose verdicts left a metric
    inconclusive (the gate asked for another), and no commit ran more than max_runs."""
    by_commit: dict[str, list] = {}  # type: ignore[type-arg]
    for run in runs:
        by_commit.setdefault(run.context.commit, []).append(run)
    for commit, commit_runs in by_commit.items():
        if commit == good:
            assert len(commit_runs) == 3 and all(not r.verdicts for r in commit_runs)
            continue
        assert len(commit_runs) <= 3, commit
        for earlier in commit_runs[:-1]:
            assert any(v.status.value == "inconclusive" for v in earlier.verdicts), commit
