"""The gate v0: relative change against the tolerance, in the metric's own direction."""

from __future__ import annotations

from perfgate.errors import ExitCode
from perfgate.gate import Status, judge_metric, judge_samples, overall_status
from perfgate.gate.verdict import Verdict, exit_code

BASE = [[100.0, 101.0, 99.0], [100.5, 99.5, 100.0]]


def test_throughput_drop_beyond_tolerance_is_a_regression() -> None:
    verdict = judge_metric("output_tok_s", BASE, [90.0, 91.0, 89.0], tolerance=0.05)
    assert verdict.status is Status.REGRESSION
    assert verdict.change is not None and abs(verdict.change + 0.10) < 0.005


def test_change_inside_tolerance_passes() -> None:
    assert judge_metric("output_tok_s", BASE, [97.0, 98.0, 96.5], 0.05).status is Status.PASS


def test_direction_is_the_metrics_own() -> None:
    # verify_ms is better lower: +10% is a regression, -10% an improvement.
    assert judge_metric("verify_ms", BASE, [110.0, 111.0], 0.05).status is Status.REGRESSION
    assert judge_metric("verify_ms", BASE, [90.0, 89.0], 0.05).status is Status.IMPROVEMENT
    assert judge_metric("output_tok_s", BASE, [110.0, 111.0], 0.05).status is Status.IMPROVEMENT


def test_one_slow_repeat_does_not_move_the_median() -> None:
    assert judge_metric("output_tok_s", BASE, [100.0, 20.0, 101.0], 0.05).status is Status.PASS


def test_missing_samples_are_errors_not_passes() -> None:
    verdicts = judge_samples(
        {"output_tok_s": [1.0]}, {"output_tok_s": BASE}, {}, ["output_tok_s", "verify_ms"]
    )
    assert [v.status for v in verdicts] == [Status.REGRESSION, Status.ERROR]


def test_overall_status_and_exit_codes() -> None:
    ok = Verdict("output_tok_s", Status.PASS, "")
    bad = Verdict("verify_ms", Status.REGRESSION, "")
    assert overall_status([ok]) is Status.PASS
    assert overall_status([ok, bad]) is Status.REGRESSION
    assert overall_status([ok], equivalent=False) is Status.REGRESSION
    assert exit_code(Status.PASS) is ExitCode.PASS
    assert exit_code(Status.REGRESSION) is ExitCode.REGRESSION
    assert exit_code(Status.INCONCLUSIVE) is ExitCode.INCONCLUSIVE
