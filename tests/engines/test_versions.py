"""Release numbers and ranges: PEP 440 order for the parts releases use."""

from __future__ import annotations

import pytest

from perfgate.sglang.versions import VersionRange, parse_version

ORDERED = [
    "0.5.4.dev12+gabc",
    "0.5.4rc1",
    "0.5.4",
    "0.5.4.post1",
    "0.5.4.post3",
    "0.5.6",
    "0.5.10",
    "0.5.10.post1",
    "0.6",
]


def test_releases_sort_as_pep_440_says() -> None:
    shuffled = [ORDERED[i] for i in (4, 0, 8, 2, 6, 1, 7, 3, 5)]
    assert sorted(shuffled, key=parse_version) == ORDERED
    assert parse_version("0.5") == parse_version("0.5.0")


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("0.5.5.post3", False),
        ("0.5.6", True),
        ("0.5.12.post1", True),
        ("0.5.13", False),
        ("0.5.13rc0", False),
    ],
)
def test_a_range_holds_its_lower_bound_not_its_upper(version: str, inside: bool) -> None:
    assert VersionRange(">=0.5.6,<0.5.13").contains(version) is inside


def test_exact_and_malformed() -> None:
    assert VersionRange("==0.5.23").contains("0.5.23")
    assert not VersionRange("==0.5.23").contains("0.5.23.post1")
    with pytest.raises(ValueError, match="not >=X, <X or ==X"):
        VersionRange("~=0.5")
    with pytest.raises(ValueError, match="not a release number"):
        parse_version("latest")
