"""A bisect's judged commits go into the history and come back, on both backends."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from perfgate.store import RunFilter
from perfgate.store.bisect_steps import BisectStep, bisect_steps, record_bisect_step
from perfgate.store.columns import history_columns

TAG = {"id": "b1", "scenario": "tiny", "good": "a" * 40, "bad": "b" * 40, "commits": 8}


def _step(position: int, likeness: str, name: str = "tiny-bisect") -> BisectStep:
    return BisectStep("b1", name, "cpu", position, f"{position:02d}" * 20, likeness, (4, 7), TAG)


def test_steps_round_trip_in_order_and_follow_the_selection(
    sessions: sessionmaker[Session],
) -> None:
    written = [_step(0, "good end"), _step(8, "like-bad"), _step(4, "like-good", "other")]
    with sessions.begin() as session:
        ids = [record_bisect_step(session, step) for step in written]
    with sessions() as session:
        every = bisect_steps(session)
        named = bisect_steps(session, RunFilter(scenario="tiny-bisect", profile="cpu"))
        elsewhere = bisect_steps(session, RunFilter(profile="gpu"))
        on_a_branch = bisect_steps(session, RunFilter(branch="main"))
        columns = history_columns(session, RunFilter(scenario="other"))

    assert [s.id for s in every] == ids
    first = every[0]
    assert (first.bisect, first.name, first.profile, first.position) == (
        "b1",
        "tiny-bisect",
        "cpu",
        0,
    )
    assert (first.commit, first.likeness, first.run_ids) == ("00" * 20, "good end", (4, 7))
    assert first.tag == TAG and first.recorded_at is not None
    assert first.recorded_at.tzinfo is not None
    assert [s.position for s in named] == [0, 8]
    assert elsewhere == [] and on_a_branch == []  # a bisect's runs carry no branch
    assert [s.position for s in columns.bisect_steps] == [4]
