"""A bisect in words: the line of each step as it is measured, and the outcome. Pure."""

from __future__ import annotations

import math
import statistics

from perfgate.bisect.classify import describe_verdicts
from perfgate.bisect.git import Commit
from perfgate.bisect.outcome import BisectResult, CommitRuns
from perfgate.bisect.search import Likeness, Position, max_steps
from perfgate.gate.verdict import Status


def start_line(result_id: str, scenario: str, name: str, commits: tuple[Commit, ...]) -> str:
    size = len(commits) - 1
    return (
        f"bisect {result_id}: scenario {scenario} (recorded as {name}) over {size} commit"
        f"{'s' if size > 1 else ''} after {commits[0].short} (good) up to "
        f"{commits[-1].short} (bad): at most {max_steps(size)} between the ends; interrupted, "
        "the same command resumes from the history"
    )


def runs_text(runs: CommitRuns) -> str:
    """'3 runs (#4 #5 #6, 1 reused)'"""
    count = len(runs.records)
    ids = " ".join(f"#{i}" for i in runs.run_ids)
    reused = f", {runs.reused} reused" if runs.reused else ""
    return f"{count} run{'s' if count != 1 else ''} ({ids}{reused})"


def good_line(runs: CommitRuns) -> str:
    tok_s = [_median(r.measurement.spec.samples.get("output_tok_s", ())) for r in runs.records]
    shown = ", ".join(f"{v:.1f}" for v in tok_s if math.isfinite(v))
    return f"good  {runs.commit.describe()}: {runs_text(runs)}; tok/s {shown}"


def bad_line(runs: CommitRuns) -> str:
    return f"bad   {runs.commit.describe()}: {_judged(runs)}"


def step_line(runs: CommitRuns, number: int, size: int, position: Position) -> str:
    """A commit between the ends: where it stands in the range, and what its runs say."""
    where = (
        f"commit {runs.index}/{size}, the first like bad is one of "
        f"{position.low + 1}..{position.high}"
    )
    return f"step {number}/{max_steps(size)} {runs.commit.describe()} ({where}): {_judged(runs)}"


def _judged(runs: CommitRuns) -> str:
    if runs.likeness is Likeness.FAILED:
        return f"failed ({runs.error}); stepped around"
    assert runs.likeness is not None
    equivalent = all(r.measurement.outputs_pass for r in runs.records)
    text = f"{runs.likeness.value}: {describe_verdicts(runs.verdicts)}; {runs_text(runs)}"
    return text if equivalent else text + "; outputs NOT equivalent to the plain twin's"


def outcome_lines(result: BisectResult, command: str) -> list[str]:
    """The outcome, with the figures that decided it, and how many commits it measured."""
    lines = _outcome(result, command)
    every = (result.good, result.bad, *result.steps)
    commits = sum(1 for c in every if c.records or c.likeness is Likeness.FAILED)
    runs = sum(len(c.records) for c in every)
    reused = sum(c.reused for c in every)
    lines.append(
        f"measured {commits} commits ({runs} runs, {reused} reused from the history) of "
        f"{result.size + 1}; runs recorded as scenario {result.name}, tagged bisect {result.id}"
    )
    return lines


def _outcome(result: BisectResult, command: str) -> list[str]:
    good, bad = result.good.commit, result.bad.commit
    if result.refused:
        if result.bad.likeness is Likeness.GOOD:
            why = "the bad end is within the tolerances of the good end's runs: "
            why += _figures(result.bad)
        else:
            why = f"the gate cannot tell them apart: {_figures(result.bad)}"
        return [
            f"Refused: {good.short} (good) and {bad.short} (bad) are not told apart: {why}.",
            "Nothing to bisect: widen the range, or measure on a quieter machine (more repeats "
            "or max_runs in the scenario narrow the interval).",
        ]
    position = result.position
    assert position is not None
    low, high = result.commits[position.low], result.commits[position.high]
    named = result.named
    if named is not None:
        runs = result.by_index()[position.high]
        lines = [
            f"Found: {named.describe()} is the first commit like bad; its parent "
            f"{low.short} is like good.",
            f"  against the good end: {describe_verdicts(runs.verdicts)}",
        ]
        moved = _attribution(runs)
        return lines + ([f"  why: {moved}"] if moved else [])
    if position.undecided:
        assert position.stopped_at is not None
        stuck = result.by_index()[position.stopped_at]
        where = (
            f"the first commit like bad is one of {low.short}..{high.short} "
            f"({position.left()} commits)"
        )
        if stuck.likeness is Likeness.BETWEEN:
            return [
                f"Cannot be told apart: {stuck.commit.describe()} is slower than the good end "
                f"but nearer it than the bad end ({_against_both(stuck, result.bad)}): part "
                f"of the regression came with it, or this machine's load moved it; {where}.",
                f"To tell which: `{command}` again on a quieter machine (its runs are "
                "reused; more repeats narrow them), or bisect each side of it: --bad "
                f"{stuck.commit.short}, then --good {stuck.commit.short}.",
            ]
        return [
            f"Cannot be told apart: {stuck.commit.describe()} is neither like good nor like "
            f"bad ({describe_verdicts(stuck.verdicts)}); {where}.",
            f"To narrow it: `{command}` again with a larger max_runs or more repeats, or "
            "bisect the part of the range on either side of it.",
        ]
    failed = ", ".join(result.commits[i].short for i in result.failed())
    return [
        f"Not measured: the first commit like bad is one of {low.short}..{high.short}; the "
        f"commits between could not be measured ({failed})."
    ]


def _against_both(runs: CommitRuns, bad: CommitRuns) -> str:
    """'verify_ms +174.0% against the bad end's +9109.8%', a clause a regression."""
    at_bad = {v.metric: v.change for v in bad.verdicts}
    clauses = []
    for verdict in runs.verdicts:
        there = at_bad.get(verdict.metric)
        changed = verdict.change is not None and there is not None
        if verdict.status is Status.REGRESSION and changed:
            clauses.append(
                f"{verdict.metric} {verdict.change:+.1%} against the bad end's {there:+.1%}"
            )
    return "; ".join(clauses)


def _figures(runs: CommitRuns) -> str:
    return f"{describe_verdicts(runs.verdicts)}; {runs_text(runs)}"


def _attribution(runs: CommitRuns) -> str | None:
    """The phase that moved, from the throughput verdict's attribution."""
    for verdict in runs.verdicts:
        if verdict.attribution is not None:
            return verdict.attribution.summary
    return None


def _median(values: tuple[float, ...]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan
