"""The gate: pure statistics from samples to verdicts."""

from perfgate.gate.judge import DEFAULT_TOLERANCE, incomparable, judge_metric, judge_samples
from perfgate.gate.verdict import Status, Verdict, exit_code, overall_status

__all__ = [
    "DEFAULT_TOLERANCE",
    "Status",
    "Verdict",
    "exit_code",
    "incomparable",
    "judge_metric",
    "judge_samples",
    "overall_status",
]
