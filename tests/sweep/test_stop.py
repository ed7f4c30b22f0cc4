"""The early-stop rule: a branch ends after two points in a row clearly worse than its best."""

from __future__ import annotations

import random

import pytest

from perfgate.sweep.stop import BranchTracker, clearly_worse


def repeats(rng: random.Random, centre: float, noise: float = 0.01, n: int = 5) -> list[float]:
    return [centre * rng.gauss(1.0, noise) for _ in range(n)]


def test_worse_beyond_the_tolerance_and_the_noise_is_clearly_worse() -> None:
    rng = random.Random(1)
    best = repeats(rng, 100)
    assert clearly_worse(best, repeats(rng, 85), tolerance=0.03)
    assert not clearly_worse(best, repeats(rng, 99), tolerance=0.03)  # within the tolerance
    assert not clearly_worse(best, repeats(rng, 85), tolerance=0.25)  # a wide tolerance
    assert not clearly_worse(best, repeats(rng, 85, noise=0.3), tolerance=0.03)  # too noisy


def test_equal_points_are_rarely_called_clearly_worse() -> None:
    rng = random.Random(7)
    alarms = sum(
        clearly_worse(repeats(rng, 100, 0.02), repeats(rng, 100 * 0.97, 0.02), 0.03)
        for _ in range(400)
    )
    assert alarms / 400 <= 0.1  # at the tolerance itself; at no change far fewer


def test_one_repeat_never_stops_anything() -> None:
    assert not clearly_worse([100.0], [10.0], 0.03)


def test_two_clearly_worse_points_in_a_row_end_the_branch() -> None:
    rng = random.Random(2)
    tracker = BranchTracker(0.03)
    curve = [80, 95, 100, 90, 97, 85, 80, 70]
    seen = []
    for centre in curve:
        if tracker.stopped:
            break
        seen.append(tracker.observe(repeats(rng, centre), equivalent=True))
    # 90 is clearly worse, 97 is not (the count restarts), then 85 and 80 end it.
    assert seen == [False, False, False, True, False, True, True]
    assert tracker.stop_index == 6 and tracker.stopped


def test_an_equivalent_point_outranks_a_faster_inequivalent_one() -> None:
    rng = random.Random(3)
    tracker = BranchTracker(0.03)
    tracker.observe(repeats(rng, 200), equivalent=False)
    tracker.observe(repeats(rng, 100), equivalent=True)
    assert tracker.best is not None and tracker.best_equivalent
    assert tracker.observe(repeats(rng, 150), equivalent=False) is False  # faster than the best
    assert tracker.best_equivalent and 95 < sorted(tracker.best)[2] < 105


@pytest.mark.parametrize("tok_s", [[], [float("nan")]])
def test_a_point_without_tok_s_is_never_best(tok_s: list[float]) -> None:
    tracker = BranchTracker(0.03)
    assert tracker.observe(tok_s, equivalent=True) is False
    assert tracker.best is None
