"""What a bisect found: each commit's runs and likeness, the outcome, the exit code. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.bisect.git import Commit
from perfgate.bisect.search import Likeness, Position, failed_between, max_steps
from perfgate.errors import ExitCode
from perfgate.gate.verdict import Verdict
from perfgate.results import RunRecord

BISECT_KEY = "bisect"  # the entry of a bisect's runs' recorded config that tags them


def bisect_id(name: str, digest: str, good: str, bad: str) -> str:
    """The id a bisect's runs are tagged with: its history name, scenario digest and ends."""
    blob = json.dumps([name, digest, good, bad]).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@dataclass
class CommitRuns:
    """One commit's runs (reused from the history, then measured), and what they say."""

    index: int  # 0 is the good end, `size` the bad end
    commit: Commit
    records: list[RunRecord] = field(default_factory=list)
    reused: int = 0  # how many of `records` came from the history
    verdicts: tuple[Verdict, ...] = ()  # the last look's, against the good end
    likeness: Likeness | None = None  # None for the good end
    error: str | None = None  # why it could not be measured (likeness FAILED)

    @property
    def run_ids(self) -> list[int]:
        return [r.id for r in self.records if r.id is not None]

    @property
    def measured(self) -> int:
        """Runs measured by this bisect (not reused)."""
        return len(self.records) - self.reused


@dataclass(frozen=True)
class BisectResult:
    """A whole bisect: its ends, the commits classified on the way, where it stopped."""

    id: str
    scenario: str  # the configured scenario measured
    name: str  # the scenario name its runs are recorded under
    commits: tuple[Commit, ...]  # the good end first, the bad end last
    good: CommitRuns
    bad: CommitRuns
    steps: tuple[CommitRuns, ...] = ()  # the commits between, in the order measured
    metrics: tuple[str, ...] = ()  # the metrics the bad end regressed in
    position: Position | None = None  # None when refused at the ends

    @property
    def size(self) -> int:
        """Commits after the good end: those that may be the first like bad."""
        return len(self.commits) - 1

    @property
    def refused(self) -> bool:
        """The ends were not told apart: the bad end is not like bad."""
        return self.bad.likeness is not Likeness.BAD

    def known(self) -> dict[int, Likeness]:
        return {c.index: c.likeness for c in self.steps if c.likeness is not None}

    @property
    def named(self) -> Commit | None:
        """The first commit like bad, whose parent is like good; None if none was named."""
        if self.refused or self.position is None or self.position.named is None:
            return None
        return self.commits[self.position.named]

    def failed(self) -> list[int]:
        """The commits left between the bounds that could not be measured."""
        return failed_between(self.position, self.known()) if self.position else []

    def by_index(self) -> Mapping[int, CommitRuns]:
        return {c.index: c for c in (self.good, self.bad, *self.steps)}

    def outcome(self) -> str:
        """named, not told apart, undecided, or unmeasured (every commit between failed)."""
        if self.refused:
            return "not told apart"
        if self.named is not None:
            return "named"
        if self.position is not None and self.position.undecided:
            return "undecided"
        return "unmeasured"

    def exit_code(self) -> ExitCode:
        """0 when one commit is named; 75 when the noise left it open (the ends not told
        apart, or a commit between undecided); 69 when the commits left could not be
        measured."""
        return {
            "named": ExitCode.PASS,
            "not told apart": ExitCode.INCONCLUSIVE,
            "undecided": ExitCode.INCONCLUSIVE,
            "unmeasured": ExitCode.INFRASTRUCTURE,
        }[self.outcome()]

    def most_steps(self) -> int:
        return max_steps(self.size)

    def to_json(self) -> dict[str, Any]:
        """The bisect as JSON-ready values."""
        position = self.position
        return {
            "id": self.id,
            "scenario": self.scenario,
            "name": self.name,
            "good": self.commits[0].sha,
            "bad": self.commits[-1].sha,
            "commits": self.size,
            "most_steps": self.most_steps(),
            "metrics": list(self.metrics),
            "outcome": self.outcome(),
            "named": self.named.sha if self.named else None,
            "range": (
                [self.commits[position.low].sha, self.commits[position.high].sha]
                if position
                else [self.commits[0].sha, self.commits[-1].sha]
            ),
            "measured": [_commit_json(c) for c in (self.good, self.bad, *self.steps)],
            "exit_code": int(self.exit_code()),
        }


def _commit_json(runs: CommitRuns) -> dict[str, Any]:
    return {
        "index": runs.index,
        "commit": runs.commit.sha,
        "subject": runs.commit.subject,
        "likeness": runs.likeness.value if runs.likeness else "good end",
        "runs": runs.run_ids,
        "reused": runs.reused,
        "error": runs.error,
        "verdicts": [v.to_dict() for v in runs.verdicts],
    }
