"""What a user chose for a gate session, whichever door they came in by.

`perfgate run --NAME`, pytest's `--perfgate-NAME` and `perfgate doctor` all resolve their
flags into these fields (perfgate.settings.Settings is a GateOptions with its resolvers);
the pipeline and the doctor read them. Plain data: no resolving happens here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateOptions:
    """The knobs shared by `perfgate run` (`--NAME`) and pytest (`--perfgate-NAME`)."""

    config: str | None = None
    scenarios: tuple[str, ...] = ()
    engine: str | None = None
    db: str | None = None
    baselines: str | None = None
    profile: str | None = None
    report: str | None = None  # "" writes no report
    gate: bool = True  # False: measure and record, judge nothing (to make a first baseline)
    refresh_plain: bool = False  # measure the plain twin even where the history has one
    require_baseline: bool = False  # only a matching reviewed baseline judges (CI=true too)
