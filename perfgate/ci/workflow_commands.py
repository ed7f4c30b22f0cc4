"""GitHub Actions workflow commands (``::error title=...::message``), escaped for the runner.

Escaping follows @actions/core's ``command.ts``: in the message ``%``, CR and LF become
``%25``, ``%0D``, ``%0A``; in a property ``:`` and ``,`` also become ``%3A`` and ``%2C``.
GitHub shows at most 10 error, 10 warning and 10 notice annotations per step and 50 per job
(actions/toolkit, docs/problem-matchers.md), so `limit_annotations` keeps the first few of each
level and says how many more there were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PER_STEP_LIMIT = 10
LEVELS = ("error", "warning", "notice")


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Annotation:
    level: str  # "error", "warning" or "notice"
    message: str
    title: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)  # file, line...

    def render(self) -> str:
        """The workflow command line that makes GitHub show this annotation."""
        props = dict(self.properties)
        if self.title:
            props["title"] = self.title
        shown = ",".join(f"{key}={escape_property(value)}" for key, value in props.items())
        return f"::{self.level}{' ' + shown if shown else ''}::{escape_data(self.message)}"


def limit_annotations(
    annotations: Sequence[Annotation],
    per_level: int = PER_STEP_LIMIT,
    where: str = "the job summary",
) -> list[Annotation]:
    """At most `per_level` of each level; the last one kept says how many were left out."""
    kept: list[Annotation] = []
    for level in LEVELS:
        of_level = [a for a in annotations if a.level == level]
        if len(of_level) <= per_level:
            kept += of_level
            continue
        kept += of_level[: per_level - 1]
        rest = len(of_level) - (per_level - 1)
        kept.append(
            Annotation(level, f"{rest} more {level}(s) not shown here: see {where}", "perfgate")
        )
    return kept
