"""The paired ratio behind the probe-overhead benchmark, on seeded synthetic launches."""

from __future__ import annotations

import random

import pytest

from perfgate.profile.overhead import RatioEstimate, paired_ratio


def launches(rng: random.Random, pairs: int, ratio: float) -> tuple[list[float], list[float]]:
    """Pairs of launches under a drift shared within a pair, with launch noise of 0.5%."""
    with_, without = [], []
    for _ in range(pairs):
        drift = 1000 * rng.uniform(0.9, 1.1)
        with_.append(drift * ratio * rng.gauss(1, 0.005))
        without.append(drift * rng.gauss(1, 0.005))
    return with_, without


def test_the_interval_covers_the_true_ratio_as_often_as_it_says() -> None:
    rng = random.Random(9)
    trials = 400
    covered = 0
    for _ in range(trials):
        estimate = paired_ratio(*launches(rng, 6, 0.99))
        covered += estimate.low <= 0.99 <= estimate.high
    assert 0.9 <= covered / trials <= 0.99


def test_drift_shared_within_pairs_cancels() -> None:
    estimate = paired_ratio(*launches(random.Random(3), 8, 0.97))
    assert estimate.ratio == pytest.approx(0.97, abs=0.005)
    assert estimate.high - estimate.low < 0.02  # the 10% drift between pairs does not widen it


@pytest.mark.parametrize(
    ("low", "ratio", "status"),
    [(0.996, 0.998, "met"), (0.990, 0.997, "not shown"), (0.980, 0.990, "missed")],
)
def test_the_goal_is_met_only_by_the_whole_interval(low: float, ratio: float, status: str) -> None:
    estimate = RatioEstimate(ratio, low, 1.0, pairs=5, confidence=0.95)
    assert estimate.goal(0.005) == status


def test_it_needs_two_pairs() -> None:
    with pytest.raises(ValueError, match="two pairs"):
        paired_ratio([1.0], [1.0])
