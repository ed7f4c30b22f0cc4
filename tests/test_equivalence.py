"""The equivalence rule: token-exact, with the first divergence reported."""

from __future__ import annotations

import pytest

from perfgate.equivalence import compare_outputs


def test_identical_outputs_pass() -> None:
    report = compare_outputs([[1, 2, 3], [4]], [[1, 2, 3], [4]])
    assert report.ok
    assert report.summary() == "2/2 prompts token-identical"


def test_first_divergence_is_reported_even_late() -> None:
    plain = list(range(100))
    spec = [*plain[:97], 999, 98, 99]
    report = compare_outputs([plain, spec], [plain, plain])
    assert not report.ok
    (bad,) = report.mismatches
    assert (bad.index, bad.first_divergence, bad.spec_token, bad.plain_token) == (1, 97, 999, 97)
    assert "prompt 1 parts at token 97" in report.summary()


def test_a_shorter_output_is_a_mismatch() -> None:
    report = compare_outputs([[1, 2]], [[1, 2, 3]])
    assert not report.ok
    assert report.prompts[0].first_divergence == 2
    assert report.prompts[0].spec_token is None and report.prompts[0].plain_token == 3


def test_prompt_counts_must_agree() -> None:
    with pytest.raises(ValueError, match="2 spec outputs against 1 plain"):
        compare_outputs([[1], [2]], [[1]])
