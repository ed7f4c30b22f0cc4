"""The gate: pure statistics from samples to verdicts, and why a throughput moved."""

from perfgate.gate.attribution import Attribution, CycleProfile, PhaseShift, attribute
from perfgate.gate.estimate import ChangeEstimate, estimate_change
from perfgate.gate.judge import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_TOLERANCE,
    Look,
    decide,
    holm_levels,
    incomparable,
    judge_look,
    judge_metric,
    judge_runs,
)
from perfgate.gate.verdict import Status, Verdict, overall_status

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BETA",
    "DEFAULT_TOLERANCE",
    "Attribution",
    "ChangeEstimate",
    "CycleProfile",
    "Look",
    "PhaseShift",
    "Status",
    "Verdict",
    "attribute",
    "decide",
    "estimate_change",
    "holm_levels",
    "incomparable",
    "judge_look",
    "judge_metric",
    "judge_runs",
    "overall_status",
]
