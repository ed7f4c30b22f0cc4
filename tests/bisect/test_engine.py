"""`perfgate bisect` on the embedded engine, over a real git history with a planted slowdown.

The repository (tests/bisect/repository.py) is a copy of perfgate's package whose commit 5
of 8 makes verify sleep 100 ms a cycle: its servers are the commit's own code, reached by
the bisect's rule (the commit's top first on the servers' path). The bisect is interrupted
with Ctrl-C during its second step and resumed, then a range without the slowdown is
refused; the report shows both. One module: about ten measured runs of the tiny model.
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

SLOW_AT = 5


@contextmanager
def _ctrl_c(process: subprocess.Popen[bytes]) -> Iterator[None]:
    process.send_signal(signal.SIGINT)  # as a terminal's Ctrl-C
    yield


def _interrupted_at(project: Path, argv: list[str], line: str) -> tuple[int, str]:
    """Run `perfgate ARGV`; send SIGINT once `line` shows in its output."""
    return run_perfgate_while(project, argv, line, _ctrl_c)


def test_the_planted_slowdown_is_found_resumed_and_told_from_noise(tmp_path: Path) -> None:
    repo, project = tmp_path / "repo", tmp_path / "project"
    ids = make_repository(repo, 8, slow_at=SLOW_AT)
    project.mkdir()
    write_config(project, BISECT_SCENARIO)
    argv = ["bisect", "--scenario", "tiny", "--repo", str(repo), "--good", ids[0], "--bad", ids[8]]

    # Ctrl-C while the second commit between the ends is measured: nothing is left behind.
    code, output = _interrupted_at(project, argv, "step 1/3")
    assert code == 130 or (code == 75 and _scattered(project, ids[0])), output
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == "" and git(repo, "rev-parse", "HEAD") == ids[8]
    before = _runs(project)
    # The good end's 3 runs, the bad end's, commit 4's: one each, or more where the gate
    # asked for another (a verdict inconclusive while this machine's load swings).
    recorded = [r.context.commit for r in before]
    assert recorded[:3] == [ids[0]] * 3
    assert recorded[3:] == sorted(recorded[3:], key=[ids[8], ids[4]].index)
    assert set(recorded[3:]) == {ids[8], ids[4]}

    # The same command resumes: the runs recorded are reused, the commit is found.
    done = perfgate_main(*argv, "--json", "bisect.json", cwd=project)
    found = json.loads((project / "bisect.json").read_text())
    runs = _runs(project)
    assert [r.id for r in runs[: len(before)]] == [r.id for r in before]  # nothing lost
    _check_extra_runs_only_where_asked(runs, ids[0])
    if done.returncode == ExitCode.INCONCLUSIVE and _scattered(project, ids[0]):
        # This machine's load scattered the good end's own runs beyond what the tolerance
        # lets the gate call like good: it says so, and names no commit, never a wrong one.
        assert found["outcome"] == "undecided" and found["named"] is None, done.stdout
        low, high = (ids.index(sha) for sha in found["range"])
        assert low < SLOW_AT <= high and "Cannot be told apart: " in done.stdout
        return
    assert done.returncode == ExitCode.PASS, done.stdout + done.stderr
    assert found["named"] == ids[SLOW_AT], done.stdout
    assert f"Found: {ids[SLOW_AT][:10]} 'change 5: verify sleeps'" in done.stdout
    assert "verify_ms regression" in done.stdout.split("Found: ")[1]  # the phase that moved
    measured = {m["index"]: m for m in found["measured"]}
    # ceil(log2(8)) = 3 commits between the ends, plus the two ends.
    assert sorted(measured) == [0, 4, 5, 6, 8]
    reused = [measured[i]["reused"] for i in (0, 8, 4)]
    assert reused == [3, recorded.count(ids[8]), recorded.count(ids[4])]
    assert [measured[i]["likeness"] for i in (8, 4, 6, 5)] == ["like-bad", "like-good"] + [
        "like-bad"
    ] * 2

    # A range without the slowdown: the ends are not told apart, the figures say why.
    quiet = ["bisect", "--scenario", "tiny", "--repo", str(repo), "--good", ids[0]]
    refused = perfgate_main(*quiet, "--bad", ids[3], cwd=project)
    assert refused.returncode == ExitCode.INCONCLUSIVE, refused.stdout + refused.stderr
    assert f"Refused: {ids[0][:10]} (good) and {ids[3][:10]} (bad) are not told apart" in (
        refused.stdout
    )
    # Under load the bad end may even look faster: anything but a regression is "not told apart".
    assert re.search(r"output_tok_s (pass|inconclusive|improvement)", refused.stdout), (
        refused.stdout
    )
    assert "3 reused from the history" in refused.stdout  # the good end's runs

    # The report shows both bisects, with the named commit.
    report = perfgate_main("report", "--out", "report.html", cwd=project)
    assert report.returncode == 0, report.stderr
    html = (project / "report.html").read_text()
    assert html.count("bisect-state") == 2
    assert f"named {ids[SLOW_AT][:10]}: the first commit like bad" in html
    assert "refused: the bad end" in html


def _runs(project: Path) -> list:  # type: ignore[type-arg]
    sessions = open_history(load_config(project / "perfgate.toml").history_url)
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


def _scattered(project: Path, good: str) -> bool:
    """Whether the good end's runs lie more than 30% apart in tok/s (15% on a quiet machine):
    the load of a machine shared with other work swung between its launches."""
    medians = [
        statistics.median(r.measurement.spec.samples["output_tok_s"])
        for r in _runs(project)
        if r.context.commit == good
    ]
    return len(medians) > 1 and max(medians) > 1.3 * min(medians)


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
