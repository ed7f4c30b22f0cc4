"""A commit's runs against the good end's, in the gate's words: like good or bad, or neither.

The good end's runs stand as the baseline (a reviewed baseline's approved runs would: each
run a fresh launch of both servers); a commit's runs are judged against them by the gate
itself (perfgate.gate.judge_look, at the scenario's tolerances and false-alarm level,
measuring again while a verdict is inconclusive and another run can settle it, up to the
scenario's ``max_runs``). Pure.

* The bad end is judged on every gated metric of the scenario. It must be like bad (some
  metric a regression) for the range to hold a regression to find; the metrics that
  regressed there are the bisect's metrics.
* Every other commit is judged on the bisect's metrics only: it is like bad when one of them
  is a regression and its figure lies nearer the bad end's than the good end's (past their
  midpoint, ratio-wise: the geometric mean), like good when all of them pass (or improve),
  between the ends when it regressed but stays nearer the good end on every such metric
  (part of the regression came with it, or the machine's load moved it: the gate's interval
  cannot say which), undecided otherwise. So a commit that the machine's load slowed beyond
  the tolerance (no tolerance under 100% absorbs a twofold swing) is not taken for the step
  the bisect looks for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from perfgate.bisect.search import Likeness
from perfgate.gate.verdict import Status, Verdict

GOOD_STATUSES = frozenset({Status.PASS, Status.IMPROVEMENT})

# Fingerprint fields a commit's own code decides, which may differ between the commits of a
# range (an SGLang commit reports its own version; a commit may change the embedded engine's
# weights): every other field is the machine's and must match the good end's.
COMMIT_FIELDS = frozenset({"engine_version", "model", "draft"})


def likeness(verdicts: Sequence[Verdict], bad_end: Sequence[Verdict] = ()) -> Likeness:
    """Like bad if a verdict is a regression (nearer the bad end than the good one, where
    the bad end's verdicts `bad_end` are given), between if every regression stays nearer
    the good end, like good if every verdict passed or improved, undecided otherwise
    (inconclusive, or a metric that could not be judged).

    >>> slower = Verdict("verify_ms", Status.REGRESSION, "", change=1.74)
    >>> likeness([slower]).value
    'like-bad'
    >>> bad = Verdict("verify_ms", Status.REGRESSION, "", change=91.1)  # 92.1 times
    >>> likeness([slower], [bad]).value  # 2.74 times: short of sqrt(92.1) = 9.6 times
    'between'
    >>> likeness([Verdict("verify_ms", Status.REGRESSION, "", change=9.0)], [bad]).value
    'like-bad'
    """
    statuses = {v.status for v in verdicts}
    if Status.REGRESSION in statuses:
        moved = {v.metric: v.change for v in bad_end if v.status is Status.REGRESSION}
        for verdict in verdicts:
            if verdict.status is Status.REGRESSION and _nearer_bad(
                verdict.change, moved.get(verdict.metric)
            ):
                return Likeness.BAD
        return Likeness.BETWEEN
    if statuses and statuses <= GOOD_STATUSES:
        return Likeness.GOOD
    return Likeness.UNDECIDED


def _nearer_bad(change: float | None, bad_change: float | None) -> bool:
    """Whether a change against the good end lies past the geometric midpoint between the
    good end and the bad end's change (True where either change is unknown: the gate's
    regression stands). Changes are relative: -0.9 is a tenth, +1.0 twice.

    >>> _nearer_bad(-0.5, -0.9), _nearer_bad(-0.7, -0.9), _nearer_bad(0.02, None)
    (False, True, True)
    """
    if change is None or bad_change is None:
        return True
    here, there = (math.log(max(1.0 + c, 1e-9)) for c in (change, bad_change))
    return abs(here) >= abs(there) / 2


def regressed(verdicts: Sequence[Verdict]) -> tuple[str, ...]:
    """The metrics whose verdict is a regression, in the verdicts' order."""
    return tuple(v.metric for v in verdicts if v.status is Status.REGRESSION)


def describe_verdicts(verdicts: Sequence[Verdict]) -> str:
    """One clause per metric: its status, change and interval against the good end.

    >>> v = Verdict("output_tok_s", Status.REGRESSION, "", change=-0.9, ci_low=-0.92,
    ...             ci_high=-0.88, tolerance=0.6)
    >>> describe_verdicts([v])
    'output_tok_s regression -90.0% (interval -92.0% to -88.0%, tolerance 60%)'
    """
    return "; ".join(describe_verdict(v) for v in verdicts)


def describe_verdict(verdict: Verdict) -> str:
    text = f"{verdict.metric} {verdict.status.value}"
    if verdict.change is None:
        return f"{text} ({verdict.message})" if verdict.message else text
    text += f" {verdict.change:+.1%}"
    if verdict.ci_low is not None and verdict.ci_high is not None:
        tolerance = f", tolerance {verdict.tolerance:.0%}" if verdict.tolerance else ""
        text += f" (interval {verdict.ci_low:+.1%} to {verdict.ci_high:+.1%}{tolerance})"
    return text


def machine_differences(
    good: Mapping[str, str], current: Mapping[str, str]
) -> list[tuple[str, str | None, str | None]]:
    """The fingerprint fields, other than the commit's own, in which two runs differ."""
    fields = sorted((set(good) | set(current)) - COMMIT_FIELDS)
    return [(f, good.get(f), current.get(f)) for f in fields if good.get(f) != current.get(f)]
