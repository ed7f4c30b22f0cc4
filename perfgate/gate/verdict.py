"""Verdicts: what the gate says about one metric, and about a whole run."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from perfgate import metrics
from perfgate.gate.attribution import Attribution


class Status(enum.StrEnum):
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    INCONCLUSIVE = "inconclusive"  # noise too high to decide; another run may
    INCOMPARABLE = "incomparable"  # the environment differs from the baseline's
    ERROR = "error"  # nothing to judge against, or the measurement failed


# The statuses of a metric that moved, or may have. A pass says nothing more; incomparable and
# error verdicts measured no change.
_MOVED = frozenset({Status.REGRESSION, Status.IMPROVEMENT, Status.INCONCLUSIVE})


@dataclass(frozen=True)
class Verdict:
    """The gate's word on one metric of one scenario."""

    metric: str
    status: Status
    message: str
    baseline: float | None = None  # the baseline's central value
    current: float | None = None  # this run's central value
    change: float | None = None  # current / baseline - 1
    ci_low: float | None = None  # the interval of `change` that decided (see gate.judge)
    ci_high: float | None = None
    tolerance: float | None = None
    runs: int | None = None  # current runs (fresh server launches) judged together
    baseline_runs: int | None = None  # approved runs judged against
    p_value: float | None = None  # one-sided, of "no regression beyond the tolerance"
    alpha: float | None = None  # the level it was tested at: its look's share, after Holm
    attribution: Attribution | None = None  # why tok/s or speedup moved, phase by phase
    with_runs: tuple[int, ...] = ()  # ids of earlier recorded runs judged with this one
    # The runs the verdict's first look waited for (planned from the baseline's spread:
    # perfgate.gate.planning), the most it may take, and the runner time its runs took (s).
    planned_runs: int | None = None
    run_budget: int | None = None
    runner_s: float | None = None

    @property
    def says_why(self) -> bool:
        """Whether the verdict explains its change phase by phase (``attribution``): a
        throughput metric (``metrics.EXPLAINED``) that moved, or may have."""
        return self.metric in metrics.EXPLAINED and self.status in _MOVED

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (the status as its name, the attribution as a dict)."""
        values = {k: v for k, v in vars(self).items() if k != "attribution"}
        values["status"] = self.status.value
        values["attribution"] = self.attribution.to_dict() if self.attribution else None
        return values


# How bad each status is for the build, worst first.
_SEVERITY = (
    Status.ERROR,
    Status.REGRESSION,
    Status.INCOMPARABLE,
    Status.INCONCLUSIVE,
    Status.IMPROVEMENT,
    Status.PASS,
)


def overall_status(verdicts: Iterable[Verdict], equivalent: bool = True) -> Status:
    """Combine metric verdicts (and the equivalence result) into the run's status."""
    statuses = {v.status for v in verdicts}
    if not equivalent:
        statuses.add(Status.REGRESSION)
    for status in _SEVERITY:
        if status in statuses:
            return status
    return Status.PASS


def runs_phrase(verdicts: Iterable[Verdict]) -> str | None:
    """What a scenario's verdict cost: its runs, their plan and their runner time; None where
    the verdicts do not say (judged before they did, or without a baseline).

    >>> print(runs_phrase([Verdict("output_tok_s", Status.PASS, "", runs=4, planned_runs=2,
    ...     run_budget=10, runner_s=208.4)]))  # doctest: +NORMALIZE_WHITESPACE
    4 in 208 s of runner time (at most 10; the first look after 2 runs,
    as the baseline's spread asks)
    """
    v = next((v for v in verdicts if v.runner_s is not None), None)
    if v is None or v.runner_s is None:
        return None
    text = f"{v.runs or 1} in {v.runner_s:.0f} s of runner time"
    if v.run_budget is not None:
        first = v.planned_runs or 1
        text += f" (at most {v.run_budget}; the first look after {first}"
        text += " run)" if first == 1 else " runs, as the baseline's spread asks)"
    return text
