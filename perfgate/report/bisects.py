"""Bisects: the runs `perfgate bisect` recorded, per bisect, and where each one got to. Pure.

A bisect's runs carry a ``bisect`` entry in their config (perfgate.bisect.outcome.BISECT_KEY):
its id, its ends and each run's place in the range. Each commit's likeness is judged again
from its newest run's recorded verdicts against the good end, by the bisect's own rule
(perfgate.bisect.classify.likeness, with the bad end's newest verdicts: like bad, between
the ends, like good, undecided); a run recorded without verdicts is read from its status
(the good end's runs carry none). The search is replayed over them (perfgate.bisect.search)
to say where the bisect stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.bisect.classify import likeness
from perfgate.bisect.outcome import BISECT_KEY
from perfgate.bisect.search import Likeness, locate
from perfgate.gate.verdict import Verdict
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
) -> list[Bisect]:
    """Group the bisects' runs (oldest first) by bisect; newest bisect first. `tok_s` and
    `verdicts` give a run's speculative tok/s and recorded verdicts, by run id."""
    groups: dict[str, list[RunFacts]] = {}
    for run in runs:
        tag = run.config.get(BISECT_KEY)
        if isinstance(tag, Mapping) and isinstance(tag.get("id"), str):
            groups.setdefault(str(tag["id"]), []).append(run)
    found = [_bisect(members, tok_s, verdicts) for members in groups.values()]
    newest = {b.id: max(r.id for r in groups[b.id]) for b in found}
    return sorted(found, key=lambda b: -newest[b.id])


def _bisect(
    runs: list[RunFacts],
    tok_s: Callable[[int], float | None],
    verdicts: Callable[[int], Sequence[Verdict]],
) -> Bisect:
    tag: Mapping[str, Any] = runs[-1].config[BISECT_KEY]
    size = int(tag.get("commits", 0))
    by_index: dict[int, list[RunFacts]] = {}
    for run in runs:
        by_index.setdefault(int(run.config[BISECT_KEY].get("index", -1)), []).append(run)
    bad_end = verdicts(by_index[size][-1].id) if size in by_index else ()
    commits = []
    for index, members in sorted(by_index.items()):
        newest = members[-1]
        judged = _likeness(newest, verdicts(newest.id), bad_end if index != size else ())
        likeness = "good end" if index == 0 else judged.value
        commits.append(
            BisectCommit(
                index,
                newest.commit or "",
                tuple(r.id for r in members),
                tok_s(newest.id),
                likeness,
            )
        )
    state, named = _state(size, commits, str(tag.get("bad", "")))
    return Bisect(
        id=str(tag["id"]),
        name=runs[-1].scenario,
        scenario=str(tag.get("scenario", "")),
        profile=runs[-1].profile,
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
