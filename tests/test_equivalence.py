"""The equivalence rule on constructed cases: matches, near ties, and real bugs."""

from __future__ import annotations

import pytest

from perfgate.equivalence import Outcome, compare_outputs, divergence_margin

PLAIN = list(range(100, 200))  # 100 tokens


def tops(
    position: int, ranked: list[tuple[float, int]], length: int = 100
) -> list[list[tuple[float, int]]]:
    """Plain top logprobs: a confident choice everywhere, `ranked` at `position`."""
    result = [[(-0.01, PLAIN[i]), (-5.0, 7)] for i in range(length)]
    result[position] = ranked
    return result


def test_identical_outputs_pass() -> None:
    report = compare_outputs([[1, 2, 3], [4]], [[1, 2, 3], [4]])
    assert report.ok
    assert report.summary() == "2/2 prompts token-identical"
    assert report.checked_share == 1.0


def test_a_near_tie_is_reported_with_its_margin_and_allowed() -> None:
    spec = [*PLAIN[:40], 999, *range(500, 559)]
    ranked = [(-0.693, PLAIN[40]), (-0.701, 999), (-4.0, 3)]
    report = compare_outputs(
        [spec, PLAIN], [PLAIN, PLAIN], [tops(40, ranked), []], max_near_tie_share=0.5
    )
    assert report.ok
    (tie,) = report.near_ties
    assert (tie.index, tie.first_divergence, tie.spec_token, tie.plain_token) == (0, 40, 999, 140)
    assert tie.margin == pytest.approx(0.008)
    assert tie.outcome is Outcome.NEAR_TIE
    assert "1 near tie(s) (allowed): prompt 0 parts at token 40" in report.summary()
    assert report.checked_share == pytest.approx(140 / 200)


def test_too_many_near_ties_fail() -> None:
    spec = [*PLAIN[:10], 999, *PLAIN[11:]]
    ranked = [(-0.69, PLAIN[10]), (-0.70, 999)]
    top = tops(10, ranked)
    report = compare_outputs([spec] * 2, [PLAIN] * 2, [top] * 2, max_near_tie_share=0.4)
    assert len(report.near_ties) == 2 and not report.diverged
    assert not report.ok and "(too many)" in report.summary()


def test_a_draft_token_the_target_would_not_choose_fails_even_late() -> None:
    # The bug: at token 97 a draft token was accepted that the target ranks 3 nats below its
    # own choice. Every other prompt matches or parts at an allowed near tie.
    buggy = [*PLAIN[:97], 555, *PLAIN[98:]]
    ranked = [(-0.05, PLAIN[97]), (-3.05, 555)]
    near = [*PLAIN[:5], 999, *PLAIN[6:]]
    report = compare_outputs(
        [buggy, near, PLAIN, PLAIN],
        [PLAIN] * 4,
        [tops(97, ranked), tops(5, [(-0.69, PLAIN[5]), (-0.70, 999)]), [], []],
        max_near_tie_share=0.5,
    )
    assert not report.ok
    (bug,) = report.diverged
    assert (bug.index, bug.first_divergence, bug.spec_token) == (0, 97, 555)
    assert bug.margin == pytest.approx(3.0) and not bug.margin_is_bound
    assert "1 diverged: prompt 0 parts at token 97 (spec 555, plain 197, margin 3)" in (
        report.summary()
    )


def test_a_token_outside_the_top_list_fails_with_a_lower_bound() -> None:
    spec = [*PLAIN[:3], 12345, *PLAIN[4:]]
    report = compare_outputs([spec], [PLAIN], [tops(3, [(-0.01, PLAIN[3]), (-0.05, 8)])])
    (bad,) = report.diverged
    assert bad.margin == pytest.approx(0.04) and bad.margin_is_bound
    assert "margin >0.04" in report.summary()


def test_without_logprobs_a_divergence_fails() -> None:
    spec = [*PLAIN[:3], 999, *PLAIN[4:]]
    report = compare_outputs([spec], [PLAIN])
    assert not report.ok
    assert "no logprobs" in report.summary()


def test_a_shorter_output_is_a_divergence_not_a_near_tie() -> None:
    report = compare_outputs([[1, 2]], [[1, 2, 3]], [[[], [], [(-0.1, 3), (-0.1, 9)]]])
    assert not report.ok
    assert report.prompts[0].first_divergence == 2
    assert report.prompts[0].spec_token is None and report.prompts[0].plain_token is None


def test_the_margin_reads_the_reference_list() -> None:
    # The reference pass itself preferred the speculative token: an unstable position.
    assert divergence_margin([(-0.60, 9), (-0.61, 4)], spec_token=9, plain_token=4) == (
        pytest.approx(-0.01),
        False,
    )
    # The list belongs to another context: the plain token is not in it.
    assert divergence_margin([(-0.6, 9), (-0.7, 8)], spec_token=9, plain_token=4) == (None, False)
    assert divergence_margin([], 1, 2) == (None, False)


def test_prompt_counts_must_agree() -> None:
    with pytest.raises(ValueError, match="2 spec outputs against 1 plain"):
        compare_outputs([[1], [2]], [[1]])


def test_a_margin_printed_as_the_threshold_is_at_the_threshold() -> None:
    # -0.7 - (-0.8) is 0.10000000000000009 in float64: a margin of 0.1 against a 0.1 threshold.
    spec = [*PLAIN[:20], 999, *PLAIN[21:]]
    report = compare_outputs(
        [spec], [PLAIN], [tops(20, [(-0.7, PLAIN[20]), (-0.8, 999)])], max_near_tie_share=1.0
    )
    (tie,) = report.near_ties
    assert report.ok and tie.describe().endswith("margin 0.1)")
    wider = compare_outputs(
        [spec], [PLAIN], [tops(20, [(-0.7, PLAIN[20]), (-0.8001, 999)])], max_near_tie_share=1.0
    )
    assert not wider.ok and len(wider.diverged) == 1


def test_nothing_compared_is_not_equivalent() -> None:
    nothing = compare_outputs([], [])
    assert not nothing.ok and nothing.summary() == "nothing compared: no prompts"
    empty = compare_outputs([[], [1, 2]], [[], [1, 2]])
    assert not empty.ok
    assert empty.summary().startswith("nothing compared for prompt(s) 0: no tokens generated")


def test_a_list_ranking_the_speculative_token_first_is_no_near_tie() -> None:
    # The plain run chose the token its own list ranks second: the list does not describe
    # its choice, so it cannot vouch for the speculative token, however close the two are.
    spec = [*PLAIN[:30], 999, *PLAIN[31:]]
    report = compare_outputs(
        [spec], [PLAIN], [tops(30, [(-0.60, 999), (-0.61, PLAIN[30])])], max_near_tie_share=1.0
    )
    (bad,) = report.diverged
    assert not report.ok and bad.margin == pytest.approx(-0.01)
    assert "margin -0.01" in report.summary()
