"""Bisects: the runs `perfgate bisect` recorded, per bisect, and where each one got to. Pure.

A bisect records each commit as it judged it (perfgate.store.bisect_steps): its likeness and
the runs it read, those it reused from the history included. A resumed or narrower bisect that
reuses another's runs measures nothing at those commits, so these steps are its only trace
there. Its runs carry a ``bisect`` entry in their config (perfgate.bisect.outcome.BISECT_KEY):
its id, its ends and each run's place in the range. A commit with runs and no step (a bisect
interrupted while it measured the commit, or recorded before steps were) is judged again from
its newest run's recorded verdicts against the good end, by the bisect's own rule
(perfgate.bisect.classify.likeness, with the bad end's newest verdicts: like bad, between
the ends, like good, undecided); a run recorded without verdicts is read from its status
(the good end's runs carry none). The search is replayed over the commits
(perfgate.bisect.search) to say where the bisect stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from perfgate.bisect.classify import likeness
from perfgate.bisect.outcome import BISECT_KEY
from perfgate.bisect.search import Likeness, locate
from perfgate.gate.verdict import Verdict
from perfgate.store.bisect_steps import BisectStep
from perfgate.store.columns import RunFacts

LIKENESS_OF_STATUS = {
    "regression": Likeness.BAD,
    "pass": Likeness.GOOD,
    "improvement": Likeness.GOOD,
    "inconclusive": Likeness.UNDECIDED,
}


@dataclass(frozen=True)
class BisectCommit:
    """One commit a bisect measured: its runs, their median tok/s, its likeness."""

    index: int
    commit: str
    run_ids: tuple[int, ...]
    tok_s: float | None  # the newest run's speculative tok/s
    likeness: str  # "good end", or a Likeness value


@dataclass(frozen=True)
class Bisect:
    id: str
    name: str  # the scenario its runs are recorded under
    scenario: str  # the configured scenario measured
    profile: str
    good: str
    bad: str
    size: int  # commits after the good end
    commits: tuple[BisectCommit, ...]  # by place in the range
    state: str  # where it got to, in words
    named: str | None  # the first commit like bad, once named


def find_bisects(
    runs: Sequence[RunFacts],
    tok_s: Callable[[int], float | None],
    verdicts: Callable[[int], Sequence[Verdict]],
    steps: Sequence[BisectStep] = (),
) -> list[Bisect]:
    """Group the bisects' runs and steps (each oldest first) by bisect; newest bisect first.
    `tok_s` and `verdicts` give a run's speculative tok/s and recorded verdicts, by run id."""
    groups: dict[str, list[RunFacts]] = {}
    for run in runs:
        tag = run.config.get(BISECT_KEY)
        if isinstance(tag, Mapping) and isinstance(tag.get("id"), str):
            groups.setdefault(str(tag["id"]), []).append(run)
    judged: dict[str, list[BisectStep]] = {}
    for step in steps:
        judged.setdefault(step.bisect, []).append(step)
    ids = list(dict.fromkeys([*groups, *judged]))
    found = [_bisect(groups.get(i, []), judged.get(i, []), tok_s, verdicts) for i in ids]
    newest = {i: _newest(groups.get(i, []), judged.get(i, [])) for i in ids}
    return sorted(found, key=lambda b: newest[b.id], reverse=True)


def _newest(runs: Sequence[RunFacts], steps: Sequence[BisectStep]) -> datetime:
    """When a bisect last recorded a run or a step."""
    times = [r.started_at for r in runs] + [s.recorded_at for s in steps if s.recorded_at]
    return max(times, default=datetime.min.replace(tzinfo=UTC))


def _bisect(
    runs: list[RunFacts],
    steps: list[BisectStep],
    tok_s: Callable[[int], float | None],
    verdicts: Callable[[int], Sequence[Verdict]],
) -> Bisect:
    tag: Mapping[str, Any] = steps[-1].tag if steps else runs[-1].config[BISECT_KEY]
    size = int(tag.get("commits", 0))
    by_index: dict[int, list[RunFacts]] = {}
    for run in runs:
        by_index.setdefault(int(run.config[BISECT_KEY].get("index", -1)), []).append(run)
    stepped = {step.position: step for step in steps}  # the newest step of each commit
    bad_ids = [r.id for r in by_index.get(size, [])] + list(
        stepped[size].run_ids if size in stepped else ()
    )
    bad_end = verdicts(max(bad_ids)) if bad_ids else ()
    commits = []
    for index in sorted(set(by_index) | set(stepped)):
        members = by_index.get(index, [])
        step = stepped.get(index)
        ids = sorted({r.id for r in members} | set(step.run_ids if step else ()))
        if index == 0:
            judged = "good end"
        elif step is not None:
            judged = step.likeness
        else:
            newest = members[-1]
            ends = bad_end if index != size else ()
            judged = _likeness(newest, verdicts(newest.id), ends).value
        commit = step.commit if step is not None else members[-1].commit or ""
        commits.append(
            BisectCommit(index, commit, tuple(ids), tok_s(ids[-1]) if ids else None, judged)
        )
    state, named = _state(size, commits, str(tag.get("bad", "")))
    return Bisect(
        id=str(tag["id"]),
        name=steps[-1].name if steps else runs[-1].scenario,
        scenario=str(tag.get("scenario", "")),
        profile=steps[-1].profile if steps else runs[-1].profile,
        good=str(tag.get("good", "")),
        bad=str(tag.get("bad", "")),
        size=size,
        commits=tuple(commits),
        state=state,
        named=named,
    )


def _likeness(run: RunFacts, verdicts: Sequence[Verdict], bad_end: Sequence[Verdict]) -> Likeness:
    if verdicts:
        return likeness(verdicts, bad_end)
    return LIKENESS_OF_STATUS.get(run.status, Likeness.FAILED)


def _state(size: int, commits: Sequence[BisectCommit], bad: str) -> tuple[str, str | None]:
    """Where the bisect got to, replayed from its commits' likeness; the named commit."""
    likeness = {c.index: c.likeness for c in commits}
    if size < 1 or size not in likeness:
        return "measuring the ends", None
    if likeness[size] != Likeness.BAD.value:
        return f"refused: the bad end {bad[:10]} is {likeness[size]}, not told apart", None
    known = {i: Likeness(v) for i, v in likeness.items() if 0 < i < size}
    position = locate(size, known)
    by_index = {c.index: c for c in commits}
    if position.named is not None:
        commit = by_index[position.named].commit
        return f"named {commit[:10]}: the first commit like bad", commit
    if position.undecided and position.stopped_at is not None:
        stuck = by_index[position.stopped_at].commit
        between = likeness[position.stopped_at] == Likeness.BETWEEN.value
        said = "slower than the good end, nearer it than the bad end" if between else "undecided"
        return f"stopped: {stuck[:10]} is {said}", None
    if position.next is not None:
        return f"unfinished: commit {position.next} of {size} is next", None
    return "stopped: the commits left could not be measured", None
