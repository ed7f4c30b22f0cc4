"""Attribution: which phase moved the cycle, and whether tokens per cycle moved."""

from __future__ import annotations

import pytest

from perfgate.gate import CycleProfile, attribute
from perfgate.gate.attribution import cycle_profile

BASE = CycleProfile(
    {"draft": 1.0, "verify": 20.0, "draft_extend": 1.0, "accept": 0.5, "cycle": 24.0},
    accept_length=2.6,
)


def test_a_slower_verify_explains_most_of_the_cycle() -> None:
    slower = CycleProfile(
        {"draft": 1.1, "verify": 22.1, "draft_extend": 1.0, "accept": 0.5, "cycle": 26.4},
        accept_length=2.6,
    )
    why = attribute("output_tok_s", -0.071, BASE, slower)
    shifts = {p.phase: p for p in why.phases}
    assert why.cycle.delta_ms == pytest.approx(2.4)
    assert shifts["verify"].delta_ms == pytest.approx(2.1)
    assert shifts["verify"].share == pytest.approx(0.875)
    assert shifts["other"].delta_ms == pytest.approx(0.2)  # 26.4 - 24.7 against 24 - 22.5
    assert sum(p.share or 0.0 for p in why.phases) == pytest.approx(1.0)
    assert why.summary == (
        "output_tok_s -7.1%: cycle +2.4 ms/cycle (+10%); "
        "verify +2.1 ms/cycle (+11%) explains 88%; accept length unchanged (2.6)"
    )


def test_fewer_accepted_tokens_with_a_steady_cycle() -> None:
    worse = CycleProfile(dict(BASE.phase_ms), accept_length=2.3)
    why = attribute("output_tok_s", -0.115, BASE, worse)
    assert all(p.share is None for p in why.phases)
    assert why.summary.endswith("cycle unchanged (24 ms); accept length -11.5% (2.6 -> 2.3)")


def test_speedup_names_both_servers() -> None:
    why = attribute("speedup", -0.05, BASE, BASE, tok_s_change=(-0.002, 0.05))
    assert why.summary.startswith("speedup -5.0%: spec tok/s -0.2%, plain tok/s +5.0%;")
    assert why.to_dict()["tok_s_change"] == [-0.002, 0.05]


def test_profiles_average_runs_not_repeats() -> None:
    profile = cycle_profile(
        [{"verify": (10.0, 10.0, 10.0), "cycle": (12.0,)}, {"verify": (20.0,), "cycle": (22.0,)}],
        accept_runs=[(2.0, 2.0), (3.0,)],
        plain_cycle_runs=[(5.0,), ()],
    )
    assert profile is not None
    assert profile.phase_ms == {"verify": 15.0, "cycle": 17.0}
    assert profile.accept_length == 2.5 and profile.plain_cycle_ms == 5.0
    assert cycle_profile([{"verify": (1.0,)}]) is None  # no cycle timings: nothing to share
