"""Two sweep points told apart beyond noise only by what their launches say, where a point
has several: the spread between launches is in the judgement, as it is in the gate's."""

from __future__ import annotations

from perfgate.gate.verdict import Status
from perfgate.metrics import Direction
from perfgate.sweep.noise import compare_points

TOLERANCE = 0.03  # verify_ms's


def _launch(centre: float) -> list[float]:
    """One launch's verify_ms repeats: within 0.1% of its centre, as on an H200."""
    return [centre * 0.999, centre, centre * 1.001]


# Launches of each setting land 6% apart, at random, while their repeats agree to 0.1%.
SLOW = [_launch(4.70), _launch(4.98), _launch(4.42)]
FAST = [_launch(4.43), _launch(4.71), _launch(4.99)]  # 0.1% faster on the mean: no change


def test_launch_to_launch_spread_keeps_two_equal_settings_within_noise() -> None:
    # One launch of each (what a sweep measures once): its first launches sit 5.7% apart, and
    # their repeats alone call that a move beyond noise.
    alone = compare_points(SLOW[:1], FAST[:1], Direction.LOWER_IS_BETTER, TOLERANCE)
    assert alone.status is Status.IMPROVEMENT and not alone.between_launches
    assert "the spread between launches is not in it" in alone.says()
    # Their three launches each: the spread between launches is measured, and the same two
    # settings are not told apart.
    judged = compare_points(SLOW, FAST, Direction.LOWER_IS_BETTER, TOLERANCE)
    assert judged.between_launches and judged.launches == (3, 3)
    assert judged.status is not Status.IMPROVEMENT
    assert judged.says().endswith("(3 and 3 launches)")


def test_a_real_move_stays_beyond_noise_between_launches() -> None:
    faster = [[v * 0.85 for v in launch] for launch in SLOW]  # every launch 15% faster
    judged = compare_points(SLOW, faster, Direction.LOWER_IS_BETTER, TOLERANCE)
    assert judged.status is Status.IMPROVEMENT
    assert judged.change is not None and abs(judged.change + 0.15) < 0.01
    assert judged.says() == "moved beyond noise (3 and 3 launches)"
