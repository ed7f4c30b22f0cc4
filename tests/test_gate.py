"""The gate's statistics on seeded synthetic runs: a few properties pinned, cheaply.

The verdict-quality figures (false alarms, detection, runs per verdict over many noise
shapes) come from `benchmarks/gate_quality.py`; these tests pin the behaviour it relies on.
"""

from __future__ import annotations

import math
import random
import re

import pytest

from perfgate.errors import ExitCode
from perfgate.gate import (
    Status,
    Verdict,
    estimate_change,
    holm_levels,
    judge_metric,
    judge_runs,
    overall_status,
)
from perfgate.gate.stats import median, pooled_pairwise_sd, t_cdf, t_ppf
from perfgate.metrics import Direction
from perfgate.reference import status_exit_code


def runs(
    seed: int,
    count: int,
    level: float = 100.0,
    within: float = 0.003,
    between: float = 0.002,
    repeats: int = 5,
) -> list[list[float]]:
    """`count` runs of `repeats` values around `level` (sds of the log: 0.003 ~ 0.3%)."""
    rng = random.Random(seed)
    result = []
    for _ in range(count):
        shift = rng.gauss(0.0, between)
        result.append([level * math.exp(shift + rng.gauss(0.0, within)) for _ in range(repeats)])
    return result


BASE = runs(seed=1, count=5)


def test_a_10_percent_drop_at_3_percent_tolerance_is_a_regression() -> None:
    verdict = judge_metric("output_tok_s", BASE, runs(2, 1, level=90.0), 0.03)
    assert verdict.status is Status.REGRESSION
    assert verdict.change is not None and abs(verdict.change + 0.10) < 0.01
    # The interval lies wholly beyond the tolerance: that is what a regression claims.
    assert verdict.ci_low is not None and verdict.ci_high is not None
    assert verdict.ci_low < verdict.change < verdict.ci_high < -0.03
    assert verdict.runs == 1 and verdict.baseline_runs == 5


def test_no_change_passes() -> None:
    for seed in range(10, 20):
        verdict = judge_metric("output_tok_s", BASE, runs(seed, 1), 0.03)
        assert verdict.status is Status.PASS, verdict.message


def test_a_small_but_certain_change_inside_the_tolerance_passes() -> None:
    # -1.5% on quiet runs is "different" to any significance test; it is within 3%.
    verdict = judge_metric("output_tok_s", BASE, runs(3, 1, level=98.5), 0.03)
    assert verdict.status is Status.PASS
    assert verdict.ci_high is not None and verdict.ci_high < 0, "the change itself is certain"


def test_direction_is_the_metrics_own() -> None:
    assert judge_metric("verify_ms", BASE, runs(4, 1, 110.0), 0.03).status is Status.REGRESSION
    assert judge_metric("verify_ms", BASE, runs(4, 1, 90.0), 0.03).status is Status.IMPROVEMENT
    assert judge_metric("output_tok_s", BASE, runs(4, 1, 110.0), 0.03).status is Status.IMPROVEMENT


def test_slow_repeats_do_not_make_a_regression() -> None:
    current = runs(5, 1)
    current[0][1] *= 0.6  # one repeat of five hit by something slow: the median holds
    once = judge_metric("output_tok_s", BASE, current, 0.03, max_runs=3)
    # One run cannot tell a stray slow repeat from a change that slows every fifth one.
    assert once.status is Status.INCONCLUSIVE and "1 of 5 repeats" in once.message
    twice = judge_metric("output_tok_s", BASE, [*current, *runs(6, 1)], 0.03, max_runs=3)
    assert twice.status is Status.PASS, twice.message  # the next run has none: a stray
    current[0][3] *= 0.7  # two of five: the run's repeats disagree, so it is not trusted alone
    two = judge_metric("output_tok_s", BASE, current, 0.03, max_runs=3)
    assert two.status is Status.INCONCLUSIVE


def test_two_slow_repeats_of_three_do_not_make_a_run_slow() -> None:
    # With 3 repeats a run's plain median is one of two slow repeats: an approved run hit
    # twice would read 30% slow, widen the spread between runs to about 15% and hide a 6%
    # regression. Its repeats far behind its own best are left out of its centre instead.
    base = runs(21, 5, repeats=3)
    base[1][0] *= 0.55
    base[1][2] *= 0.7
    slower = runs(22, 3, level=94.0, repeats=3)
    verdict = judge_metric("output_tok_s", base, slower, 0.03, max_runs=3)
    assert verdict.status is Status.REGRESSION, verdict.message
    assert verdict.change is not None and -0.07 < verdict.change < -0.05
    assert "between runs 0." in verdict.message, verdict.message


def test_a_run_whose_repeats_are_mostly_slow_is_slow() -> None:
    # Two of three repeats 30% slow in every current run, one fast: the bulk of each run is
    # slow, so the run is; and a fast outlier does not stand for a run of five.
    base = runs(23, 5, repeats=3)
    mostly = [
        [v * (0.7 if i else 1.0) for i, v in enumerate(run)] for run in runs(24, 2, repeats=3)
    ]
    verdict = judge_metric("output_tok_s", base, mostly, 0.03, max_runs=3)
    assert verdict.status is Status.REGRESSION, verdict.message
    # Two of three repeats far apart and far behind: the fastest stands for the run, and
    # the slow-tail test counts the other two, so the mean is judged too and nothing passes.
    split = [[r[0], r[1] * 0.7, r[2] * 0.55] for r in runs(26, 2, repeats=3)]
    once = judge_metric("output_tok_s", base, split[:1], 0.03, max_runs=3)
    assert once.status is Status.INCONCLUSIVE and "2 of 3 repeats" in once.message
    twice = judge_metric("output_tok_s", base, split, 0.03, max_runs=3)
    assert twice.status is Status.REGRESSION, twice.message
    fast_one = runs(25, 1, level=94.0)
    fast_one[0][0] *= 1.2
    estimate = estimate_change(BASE, fast_one, direction=Direction.HIGHER_IS_BETTER)
    assert estimate is not None and -0.07 < estimate.change < -0.05


def test_a_lone_run_with_one_stray_repeat_can_pass() -> None:
    # One repeat of three 4.5% behind its run, no change: the run's repeats scatter far more
    # than the baseline's, which widens the regression end of its interval (a run slow by
    # the chance of its repeats is no regression) but not the pass end, so one run passes.
    base = runs(31, 5, repeats=3)
    for seed in range(40, 50):
        current = runs(seed, 1, repeats=3)
        current[0][1] *= 0.955
        verdict = judge_metric("output_tok_s", base, current, 0.03, max_runs=3)
        assert verdict.status is Status.PASS, verdict.message
        assert "1 of 3 repeats" in verdict.message, "the mean was judged too"
    estimate = estimate_change(base, current, direction=Direction.HIGHER_IS_BETTER)
    assert estimate is not None and estimate.pass_se < estimate.se / 2


def test_a_lone_runs_median_error_leaves_out_the_repeats_its_median_leaves_out() -> None:
    # One repeat of three 20% behind, far outside the bulk of its run: the run's median keeps
    # the other two, so the error of that median rests on their scatter, not on the outlier's.
    # The mean counts the outlier in full, and its error does too.
    base = runs(31, 5, repeats=3)
    for seed in range(40, 50):
        current = runs(seed, 1, repeats=3)
        current[0][1] *= 0.8
        higher = Direction.HIGHER_IS_BETTER
        by_median = estimate_change(base, current, direction=higher)
        by_mean = estimate_change(base, current, centre="mean")
        assert by_median is not None and by_mean is not None
        assert by_median.se == by_median.pass_se  # no excess from the outlier
        assert by_mean.se > 3 * by_mean.pass_se
        verdict = judge_metric("output_tok_s", base, current, 0.03, max_runs=3)
        assert verdict.status is not Status.REGRESSION, verdict.message


def test_the_spread_between_runs_sets_the_error_not_the_repeats() -> None:
    # Quiet repeats (0.1%), but every server launch lands 2% apart: a 4% drop in one run is
    # not proof of a 3%+ regression. A test on the repeats alone would call it certain.
    base = runs(6, 5, within=0.001, between=0.02)
    estimate = estimate_change(base, runs(7, 1, level=96.0, within=0.001, between=0.0))
    assert estimate is not None and estimate.between_run_sd is not None
    assert estimate.between_run_sd > 5 * (estimate.within_run_sd or 0.0)
    verdict = judge_metric(
        "output_tok_s", base, runs(7, 1, level=96.0, within=0.001, between=0.0), 0.03
    )
    assert verdict.status is not Status.REGRESSION


def test_an_undecided_metric_asks_for_another_run_then_decides() -> None:
    base = runs(8, 5, within=0.003, between=0.006)
    current = runs(9, 1, level=95.5, within=0.003, between=0.006)
    first = judge_metric("output_tok_s", base, current, 0.03, max_runs=3)
    assert first.status is Status.INCONCLUSIVE
    assert "crosses the tolerance; another run may settle it" in first.message
    three = [*current, *runs(10, 2, level=95.5, within=0.003, between=0.006)]
    last = judge_metric("output_tok_s", base, three, 0.03, max_runs=3)
    assert last.runs == 3 and last.status is Status.REGRESSION
    assert last.ci_high is not None and last.ci_high < -0.03


def test_too_noisy_for_the_tolerance_stays_inconclusive() -> None:
    base = runs(11, 5, between=0.05)
    current = runs(12, 3, level=97.0, between=0.05)
    verdict = judge_metric("output_tok_s", base, current, 0.03, max_runs=3)
    assert verdict.status is Status.INCONCLUSIVE
    assert verdict.message.endswith("the interval crosses the tolerance; the run budget is spent")


def test_one_run_each_side_claims_nothing_and_says_so() -> None:
    # One approved run and one current run: how far launches land apart is unseen, so even
    # a 20% drop is no verdict yet (nor would a pass be), and the message says what to do.
    verdict = judge_metric("output_tok_s", BASE[:1], runs(13, 1, level=80.0), 0.03, max_runs=3)
    assert verdict.status is Status.INCONCLUSIVE
    assert "approve more baseline runs" in verdict.message
    assert "spread between launches is unseen: to be confirmed by another run" in verdict.message
    confirmed = judge_metric("output_tok_s", BASE[:1], runs(13, 3, level=80.0), 0.03, max_runs=3)
    assert confirmed.status is Status.REGRESSION
    single = judge_metric("output_tok_s", [[100.0]], [[80.0]], 0.03)
    assert single.status is Status.INCONCLUSIVE  # nothing tells how noisy one value is
    exact = judge_metric("accept_length", [[2.6] * 5] * 3, [[2.6] * 5], 0.03)
    assert exact.status is Status.PASS  # a deterministic metric that did not move


@pytest.mark.parametrize(
    ("current", "shown"),
    [
        ([[0.0, 0.0, 0.0, 100.0, 100.0]], " in 3 of 5 repeats (output_tok_s 0, 0, 0)"),
        ([[0.0] * 5], " in 5 of 5 repeats (output_tok_s 0, 0, 0, ...)"),
        ([[100.0, -1.0, 100.0, 100.0, 100.0]], " in 1 of 5 repeats (output_tok_s -1)"),
        ([[100.0, float("nan"), 100.0, 100.0, 100.0]], " in 1 of 5 repeats (output_tok_s nan)"),
        ([], ": no output_tok_s was measured"),
    ],
    ids=["some-zero", "all-zero", "negative", "nan", "missing"],
)
def test_a_server_that_produced_nothing_is_a_regression(
    current: list[list[float]], shown: str
) -> None:
    verdict = judge_metric("output_tok_s", BASE, current, 0.03)
    assert verdict.status is Status.REGRESSION
    assert verdict.message == "the server produced nothing" + shown
    assert status_exit_code(overall_status([verdict])) is ExitCode.REGRESSION


def test_a_degenerate_spread_never_gives_certainty() -> None:
    constant = [[100.0, 100.0, 100.0]] * 5  # a baseline that repeats exactly
    scattered = judge_metric("output_tok_s", constant, [[90.0, 96.0, 99.0]], 0.03)
    assert scattered.status is Status.INCONCLUSIVE, scattered.message
    assert scattered.p_value is not None and scattered.p_value > 0.05
    assert "in the current runs" in scattered.message  # the spread that kept it open
    wide = judge_metric("output_tok_s", constant, [[85.0, 97.5, 110.0]], 0.03)
    assert wide.status is Status.INCONCLUSIVE
    assert wide.ci_low is not None and wide.ci_high is not None
    assert wide.ci_high - wide.ci_low > 0.1
    # A metric that repeats exactly on both sides (a deterministic engine's accept length)
    # still gets an interval of some width and a p-value above 0.
    same = judge_metric("accept_length", [[2.6] * 5] * 5, [[2.6] * 5], 0.03)
    assert same.status is Status.PASS
    assert same.ci_low is not None and same.ci_high is not None and same.ci_low < same.ci_high
    lower = judge_metric("accept_length", [[2.6] * 5] * 5, [[2.5] * 5], 0.03)
    assert lower.status is Status.REGRESSION and lower.p_value is not None and lower.p_value > 0


def test_intermittent_slow_repeats_are_a_regression_and_show_their_spread() -> None:
    # Every run has two of its five repeats 12% slow: the median of each run hardly moves,
    # the mean drops by 5%, beyond the 3% tolerance.
    slow = [[v * (0.88 if i < 2 else 1.0) for i, v in enumerate(run)] for run in runs(5, 3)]
    first = judge_metric("output_tok_s", BASE, slow[:1], 0.03, max_runs=3)
    assert first.status is Status.INCONCLUSIVE  # one run: a stray, or a pattern?
    verdict = judge_metric("output_tok_s", BASE, slow, 0.03, max_runs=3)
    assert verdict.status is Status.REGRESSION, verdict.message
    assert verdict.change is not None and -0.06 < verdict.change < -0.04
    assert "judged on the mean of the repeats too: 6 of 15 repeats over 3.0% behind" in (
        verdict.message
    )
    # The spread that decided: the run means' between runs, and the current repeats' own.
    assert re.search(
        r"spread of run means between runs 0\.\d%, within runs 0\.\d% "
        r"\(\d\.\d% in the current runs\)",
        verdict.message,
    ), verdict.message


def test_missing_samples_are_errors_not_passes() -> None:
    verdicts = judge_runs(
        {"output_tok_s": BASE, "verify_ms": []},
        {"output_tok_s": runs(14, 1), "accept_length": [[float("nan")] * 5]},
        {},
        ["output_tok_s", "verify_ms", "accept_length"],
    )
    assert [v.status for v in verdicts] == [Status.PASS, Status.ERROR, Status.ERROR]
    assert [v.message for v in verdicts[1:]] == [
        "not measured",
        "the baseline has no samples",
    ]


def test_holm_tests_the_strongest_evidence_first() -> None:
    levels = holm_levels({"a": 0.001, "b": 0.02, "c": 0.4}, 0.05)
    assert levels == {"a": 0.05 / 3, "b": 0.05 / 2, "c": 0.05}
    assert holm_levels({"a": 0.5, "b": 0.01}, 0.05) == {"b": 0.025, "a": 0.05}
    # Once one hypothesis is kept, the rest are kept at that same level.
    kept = holm_levels({"a": 0.001, "b": 0.04, "c": 0.03}, 0.05)
    assert kept == {"a": 0.05 / 3, "c": 0.025, "b": 0.025}


def test_a_family_splits_the_level_among_its_metrics() -> None:
    gated = ["output_tok_s", "speedup", "accept_length", "verify_ms"]
    same = {m: runs(20 + i, 1) for i, m in enumerate(gated)}
    base = {m: runs(30 + i, 5) for i, m in enumerate(gated)}
    verdicts = judge_runs(base, same, {}, gated, alpha=0.2)
    assert all(v.status is Status.PASS for v in verdicts)
    assert sorted(v.alpha for v in verdicts if v.alpha is not None)[0] == pytest.approx(0.05)


def test_student_t_matches_tables() -> None:
    assert t_ppf(0.975, 4) == pytest.approx(2.776445, abs=1e-5)
    assert t_ppf(0.99, 10) == pytest.approx(2.763769, abs=1e-5)
    assert t_ppf(0.05, 1) == pytest.approx(-6.313752, abs=1e-5)
    assert t_cdf(2.0, 5) == pytest.approx(0.9490303, abs=1e-6)


def test_the_pooled_spread_is_calibrated_and_ignores_shifts_between_groups() -> None:
    rng = random.Random(15)
    groups = [[rng.gauss(10.0 * g, 1.0) for _ in range(5)] for g in range(400)]
    spread = pooled_pairwise_sd(groups)
    assert spread is not None and spread[0] == pytest.approx(1.0, rel=0.05)
    assert median([3.0, 1.0, 2.0, 10.0]) == 2.5


def test_overall_status_and_exit_codes() -> None:
    ok = Verdict("output_tok_s", Status.PASS, "")
    bad = Verdict("verify_ms", Status.REGRESSION, "")
    assert overall_status([ok]) is Status.PASS
    assert overall_status([ok, bad]) is Status.REGRESSION
    assert overall_status([ok], equivalent=False) is Status.REGRESSION
    assert status_exit_code(Status.PASS) is ExitCode.PASS
    assert status_exit_code(Status.REGRESSION) is ExitCode.REGRESSION
    assert status_exit_code(Status.INCONCLUSIVE) is ExitCode.INCONCLUSIVE


@pytest.mark.parametrize(
    "module",
    [
        "perfgate.gate.judge",
        "perfgate.gate.evidence",
        "perfgate.gate.looks",
        "perfgate.gate.tail",
        "perfgate.gate.planning",
        "perfgate.gate.verdict",
        "perfgate.spec.slowdown",
        "perfgate.equivalence",
        "perfgate.plan.forecast",
    ],
    ids=lambda name: name,
)
def test_the_documented_examples_hold(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
