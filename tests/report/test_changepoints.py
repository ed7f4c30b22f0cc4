"""Change points on seeded synthetic series: steps found where they are, noise left alone."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from perfgate.report.changepoints import (
    _best_splits,
    critical_t,
    detect_change_points,
    student_t_two_sided,
)


def steps(levels: list[tuple[float, int]], sd: float, seed: int) -> np.ndarray:
    """Concatenated segments of `count` normal draws around each level."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(level, sd, count) for level, count in levels])


@pytest.mark.parametrize("seed", range(5))
def test_one_step_is_found_where_it_is_with_its_levels(seed: int) -> None:
    series = steps([(100.0, 60), (91.0, 60)], sd=2.0, seed=seed)  # tok/s falls 9%
    (change,) = detect_change_points(series)
    assert abs(change.index - 60) <= 1
    assert change.before == pytest.approx(100.0, abs=1.0)
    assert change.after == pytest.approx(91.0, abs=1.0)
    assert change.change == pytest.approx(-0.09, abs=0.015)
    assert change.p_value < 1e-4


def test_two_steps_in_a_long_series_are_both_found() -> None:
    series = steps([(14.0, 3000), (15.26, 3000), (14.6, 2000)], sd=0.3, seed=7)
    found = detect_change_points(series, max_p=1e-4)
    assert [c.index for c in found] == pytest.approx([3000, 6000], abs=2)


@pytest.mark.parametrize("seed", range(10))
def test_noise_around_one_level_has_no_change_point(seed: int) -> None:
    assert detect_change_points(steps([(100.0, 2000)], sd=2.0, seed=seed), max_p=1e-4) == []


def test_a_single_wild_run_is_not_a_level_shift() -> None:
    series = steps([(100.0, 80)], sd=1.0, seed=1)
    series[40] = 160.0
    series[-1] = 10.0  # nor is one at the very end
    assert detect_change_points(series) == []


def test_a_shift_at_the_end_shows_once_enough_runs_follow_it() -> None:
    base = list(steps([(100.0, 60)], sd=1.0, seed=2))
    assert detect_change_points([*base, 90.0]) == []
    found = detect_change_points([*base, 90.0, 90.2, 89.9])
    assert [c.index for c in found] == [60]


def test_flat_segments_split_exactly_and_equal_ones_do_not() -> None:
    (change,) = detect_change_points([5.0] * 10 + [6.0] * 10)
    assert (change.index, change.before, change.after, change.p_value) == (10, 5.0, 6.0, 0.0)
    assert detect_change_points([5.0] * 30) == []


def test_min_change_drops_shifts_too_small_to_matter() -> None:
    series = steps([(100.0, 200), (101.0, 200)], sd=0.2, seed=4)  # +1%, very significant
    assert len(detect_change_points(series)) == 1
    assert detect_change_points(series, min_change=0.02) == []


def test_short_series_give_nothing() -> None:
    assert detect_change_points([]) == []
    assert detect_change_points([1.0, 2.0, 3.0]) == []


def test_best_split_maximises_the_energy_statistic_by_brute_force() -> None:
    rng = np.random.default_rng(9)
    windows = np.stack(
        [rng.normal(0, 1, 12) + np.r_[np.zeros(5), np.full(7, s)] for s in (0, 1, 3)]
    )

    def q(x: np.ndarray, tau: int) -> float:
        left, right = x[:tau], x[tau:]
        m, n = len(left), len(right)
        between = np.abs(left[:, None] - right[None, :]).sum()
        within_l = sum(abs(a - b) for a, b in itertools.combinations(left, 2)) / (m * (m - 1) / 2)
        within_r = sum(abs(a - b) for a, b in itertools.combinations(right, 2)) / (n * (n - 1) / 2)
        return m * n / (m + n) * (2 * between / (m * n) - within_l - within_r)

    expected = [max(range(2, 11), key=lambda t: q(w, t)) for w in windows]
    assert list(_best_splits(windows, min_size=2)) == expected


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(2.0, 10, 0.07339), (2.228, 10, 0.05), (3.169, 10, 0.01), (1.96, 10**6, 0.05), (0.0, 5, 1.0)],
)
def test_student_t_tail_matches_tables(t: float, df: int, p: float) -> None:
    assert student_t_two_sided(t, df) == pytest.approx(p, abs=2e-4)


def test_critical_t_is_the_inverse_of_the_tail() -> None:
    for p, df in ((0.01, 48), (0.001, 10), (0.05, 1000)):
        assert student_t_two_sided(critical_t(p, df), df) == pytest.approx(p, rel=1e-6)
