"""Bisects: the runs `perfgate bisect` recorded, per bisect, and where each one got to. Pure.

A bisect's runs carry a ``bisect`` entry in their config (perfgate.bisect.outcome.BISECT_KEY):
its id, its ends and each run's place in the range. Each commit's likeness is the one its
newest run's tag records (what the bisect judged it); a run recorded without one is read
from its status, as recorded with its verdicts against the good end (a regression: like
bad; pass or improvement: like good; inconclusive: undecided; the good end's runs carry no
verdict). The search is replayed over them (perfgate.bisect.search) to say where the bisect
stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.bisect.outcome import BISECT_KEY
from perfgate.bisect.search import Likeness, locate
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


def find_bisects(runs: Sequence[RunFacts], tok_s: Callable[[int], float | None]) -> list[Bisect]:
    """Group the bisects' runs (oldest first) by bisect; newest bisect first."""
    groups: dict[str, list[RunFacts]] = {}
    for run in runs:
        tag = run.config.get(BISECT_KEY)
        if isinstance(tag, Mapping) and isinstance(tag.get("id"), str):
            groups.setdefault(str(tag["id"]), []).append(run)
    found = [_bisect(members, tok_s) for members in groups.values()]
    newest = {b.id: max(r.id for r in groups[b.id]) for b in found}
    return sorted(found, key=lambda b: -newest[b.id])


def _bisect(runs: list[RunFacts], tok_s: Callable[[int], float | None]) -> Bisect:
    tag: Mapping[str, Any] = runs[-1].config[BISECT_KEY]
    size = int(tag.get("commits", 0))
    by_index: dict[int, list[RunFacts]] = {}
    for run in runs:
        by_index.setdefault(int(run.config[BISECT_KEY].get("index", -1)), []).append(run)
    commits = []
    for index, members in sorted(by_index.items()):
        newest = members[-1]
        likeness = "good end" if index == 0 else _likeness(newest).value
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


def _likeness(run: RunFacts) -> Likeness:
    recorded = run.config[BISECT_KEY].get("likeness")
    if recorded in {k.value for k in Likeness}:
        return Likeness(recorded)
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
