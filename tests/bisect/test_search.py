"""The bisection over classified commits: where it goes next, when it stops, how far it takes."""

from __future__ import annotations

import math

import pytest

from perfgate.bisect.search import Likeness, failed_between, locate, max_steps

GOOD, BAD, UNDECIDED, FAILED = Likeness.GOOD, Likeness.BAD, Likeness.UNDECIDED, Likeness.FAILED


def bisect(size: int, first_bad: int) -> tuple[int | None, list[int]]:
    """Run the search against a range whose commits from `first_bad` on are like bad."""
    known: dict[int, Likeness] = {}
    while (position := locate(size, known)).next is not None:
        known[position.next] = BAD if position.next >= first_bad else GOOD
    return position.named, list(known)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 64, 100])
def test_every_first_bad_commit_is_named_within_ceil_log2_steps(size: int) -> None:
    for first_bad in range(1, size + 1):
        named, measured = bisect(size, first_bad)
        assert named == first_bad
        assert len(measured) <= math.ceil(math.log2(size)) if size > 1 else not measured
        assert len(set(measured)) == len(measured)  # no commit measured twice
        assert all(0 < i < size for i in measured)  # the ends are not the search's


def test_a_power_of_two_range_always_takes_exactly_log2_steps() -> None:
    assert {len(bisect(8, first)[1]) for first in range(1, 9)} == {3}
    assert max_steps(8) == 3


def test_an_undecided_commit_stops_the_search_where_it_stands() -> None:
    position = locate(8, {4: GOOD, 6: UNDECIDED})
    assert position.next is None and position.named is None
    assert (position.low, position.high, position.stopped_at) == (4, 8, 6)
    assert position.left() == 4


def test_a_failed_commit_is_stepped_around_to_its_nearest_neighbour() -> None:
    assert locate(8, {4: FAILED}).next == 3
    assert locate(8, {4: FAILED, 3: FAILED}).next == 5
    assert locate(8, {4: FAILED, 3: BAD}).next == 1


def test_when_every_commit_between_failed_the_range_is_the_answer() -> None:
    known = {1: GOOD, 2: FAILED, 3: FAILED}
    position = locate(4, known)
    assert position.next is None and position.named is None and not position.undecided
    assert (position.low, position.high) == (1, 4)
    assert failed_between(position, known) == [2, 3]


def test_the_path_is_replayed_from_the_classifications_alone() -> None:
    """A resumed bisect, given what was classified before, asks for the same next commit."""
    known = {4: GOOD}
    assert locate(8, known).next == 6
    assert locate(8, dict(known)).next == locate(8, known).next


@pytest.mark.parametrize("module", ["perfgate.bisect.search", "perfgate.bisect.classify"])
def test_the_documented_examples_hold(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
