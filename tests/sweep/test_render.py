"""The sweep's table and best line, on synthetic results: what a user reads after a sweep."""

from __future__ import annotations

from dataclasses import replace

from perfgate.results import ModeResult
from perfgate.sweep.grid import Point, SweepSpec
from perfgate.sweep.render import best_line, render_markdown, sweep_json
from perfgate.sweep.results import PointResult, SweepResult

from ..factories import measurement

SPEC = SweepSpec("tiny-steps", "tiny", steps=(1, 2, 3))


def sweep(spec_tok_s: dict[int, float], equivalent: bool = True) -> SweepResult:
    """A steps sweep whose points run at these tok/s against a plain twin at 100 tok/s."""
    points = []
    for run_id, (steps, tok_s) in enumerate(spec_tok_s.items(), start=1):
        outputs = None if equivalent else ((9, 9, 9), (4, 5, 6))
        m = measurement(spec_outputs=outputs)
        m = replace(m, spec=_at(m.spec, tok_s), plain=_at(m.plain, 100.0))
        point = Point(env=(), steps=steps, topk=1, draft_tokens=steps + 1)
        points.append(PointResult(point, "tiny-steps", run_id=run_id, measurement=m))
    return SweepResult(SPEC, "tiny", tuple(points), plain={"": 100.0})


def _at(result: ModeResult, tok_s: float) -> ModeResult:
    return replace(result, samples={**result.samples, "output_tok_s": (tok_s,) * 3})


def test_the_best_point_that_beats_plain_decoding_is_named() -> None:
    result = sweep({1: 110.0, 2: 125.0, 3: 95.0})
    assert best_line(result) == (
        "Best: steps=2 topk=1 draft_tokens=3: 125.0 tok/s (1.25x plain), accept length 2.50 "
        "(run #2)."
    )
    assert "| **best** |" in render_markdown(result)
    assert sweep_json(result)["none_beats_plain"] is False


def test_when_no_point_beats_plain_decoding_the_best_line_says_so() -> None:
    result = sweep({1: 85.0, 2: 91.0, 3: 100.0})  # 100.0: as fast as plain, no faster
    assert best_line(result) == (
        "Best: none beats plain decoding (fastest: steps=3 topk=1 draft_tokens=4: 100.0 tok/s "
        "(1.00x plain), accept length 2.50 (run #3)): speculative decoding costs more than it "
        "saves here."
    )
    table = render_markdown(result)
    assert "**best**" not in table and "| fastest |" in table
    document = sweep_json(result)
    assert document["none_beats_plain"] is True and document["best"]["run"] == 3


def test_inequivalent_points_are_not_counted_as_beating_plain_decoding() -> None:
    result = sweep({1: 130.0, 2: 140.0}, equivalent=False)
    assert best_line(result).startswith("Best: none: no point's outputs were equivalent")
    assert sweep_json(result)["none_beats_plain"] is False  # nothing equivalent to judge
