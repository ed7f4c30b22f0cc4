"""The report's bisects: each bisect's commits, their likeness, and where it got to."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from perfgate.bisect.outcome import BISECT_KEY
from perfgate.gate import Status
from perfgate.gate.verdict import Verdict
from perfgate.report import render_report
from perfgate.report.chart_data import bisects_of
from perfgate.results import RunContext, RunRecord
from perfgate.store.bisect_steps import BisectStep
from perfgate.store.columns import columns_from_records

from ..factories import measurement

COMMITS = [f"{i:02d}" * 20 for i in range(9)]  # 40 hex digits each
TAG_B2 = {"id": "b2", "scenario": "tiny", "good": COMMITS[0], "bad": COMMITS[6], "commits": 6,
          "sources": ["."]}  # fmt: skip


def bisect_run(
    index: int,
    status: Status,
    bisect: str = "b1",
    tok_s: float = 200.0,
    tag: dict[str, object] | None = None,
) -> RunRecord:
    """A run of bisect `bisect` over commits 0-8 at commit `index`, or of the bisect `tag`."""
    base = tag or {"id": bisect, "scenario": "tiny", "good": COMMITS[0], "bad": COMMITS[8],
                   "commits": 8, "sources": ["."]}  # fmt: skip
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=index)
    m = measurement("tiny-bisect", spec_tok_s=tok_s, started=start)
    m = replace(m, config={**m.config, BISECT_KEY: {**base, "index": index}})
    return RunRecord(m, RunContext(commit=COMMITS[index]), (), status)


def _runs(*steps: tuple[int, Status]) -> list[RunRecord]:
    good = [bisect_run(0, Status.PASS) for _ in range(3)]
    return good + [
        bisect_run(i, s, tok_s=20.0 if s is Status.REGRESSION else 200.0) for i, s in steps
    ]


def _bisects(runs: list[RunRecord]):  # type: ignore[no-untyped-def]
    runs = [replace(r, id=i + 1) for i, r in enumerate(runs)]
    return bisects_of(columns_from_records(runs)), runs


def test_a_finished_bisect_names_its_commit() -> None:
    R, P = Status.REGRESSION, Status.PASS
    (found,), _ = _bisects(_runs((8, R), (4, P), (6, R), (5, R)))
    assert found.named == COMMITS[5]
    assert found.state.startswith("named 0505050505")
    assert [(c.index, c.likeness) for c in found.commits] == [
        (0, "good end"), (4, "like-good"), (5, "like-bad"), (6, "like-bad"), (8, "like-bad"),
    ]  # fmt: skip
    assert found.commits[0].run_ids == (1, 2, 3)


def test_an_unfinished_refused_or_undecided_bisect_says_so() -> None:
    R, P, U = Status.REGRESSION, Status.PASS, Status.INCONCLUSIVE
    assert _bisects(_runs((8, R), (4, P)))[0][0].state == "unfinished: commit 6 of 8 is next"
    refused = _bisects(_runs((8, P)))[0][0]
    assert refused.state.startswith("refused: the bad end") and refused.named is None
    assert _bisects(_runs((8, R), (4, U)))[0][0].state == "stopped: 0404040404 is undecided"
    assert _bisects(_runs())[0][0].state == "measuring the ends"


def test_the_page_shows_each_bisect() -> None:
    R, P = Status.REGRESSION, Status.PASS
    _, runs = _bisects(_runs((8, R), (4, P), (6, R), (5, R)))
    html = render_report(runs, repository="https://github.com/o/r")
    section = html[html.index('<section class="group" id="bisects">') :]
    assert "named 0505050505: the first commit like bad" in section
    assert f'<tr class="named"><td><a href="https://github.com/o/r/commit/{COMMITS[5]}">' in section
    assert section.count("<tr") == 6  # the head and five commits
    assert 'id="bisects"' not in render_report(
        runs[:0] or [replace(runs[0], measurement=measurement())]
    )


def test_each_commit_is_judged_from_its_recorded_verdicts_by_the_bisects_rule() -> None:
    """Commit 4's recorded verdict is a regression of -25% against the good end, the bad end's
    -90%: nearer the good end, so between the ends, as the bisect judged it; at -85% it is
    like bad. The statuses alone would say like bad for both."""
    R = Status.REGRESSION

    def runs_with(change: float) -> list[RunRecord]:
        runs = _runs((8, R), (4, R))
        for index, moved in ((-2, -0.9), (-1, change)):
            verdict = Verdict("output_tok_s", R, "", change=moved)
            runs[index] = replace(runs[index], verdicts=(verdict,))
        return runs

    (found,), _ = _bisects(runs_with(-0.25))
    assert [(c.index, c.likeness) for c in found.commits][1:] == [(4, "between"), (8, "like-bad")]
    said = "stopped: 0404040404 is slower than the good end, nearer it than the bad end"
    assert found.state == said
    (found,), _ = _bisects(runs_with(-0.85))
    assert [(c.index, c.likeness) for c in found.commits][1:] == [(4, "like-bad"), (8, "like-bad")]
    assert found.state == "unfinished: commit 2 of 8 is next"


def test_a_bisect_that_reused_another_s_runs_shows_the_commits_it_judged_from_them() -> None:
    """Bisect b2 (commits 0-6 of b1's range) judged 0, 4, 5 and 6 from b1's runs and measured
    only commit 3: its steps say how it judged each, with the runs it read."""
    R, P = Status.REGRESSION, Status.PASS
    first = _runs((8, R), (4, P), (6, R), (5, R))  # runs 1-3 (the good end), 4 (8), 5, 6, 7
    mine = bisect_run(3, P, tag=TAG_B2)
    columns = columns_from_records([replace(r, id=i + 1) for i, r in enumerate([*first, mine])])
    judged = ((0, "good end", (1, 2, 3)), (6, "like-bad", (6,)), (3, "like-good", (8,)),
              (4, "like-good", (5,)), (5, "like-bad", (7,)))  # fmt: skip
    columns.bisect_steps = [
        BisectStep("b2", "tiny-bisect", "cpu", index, COMMITS[index], likeness, ids, TAG_B2)
        for index, likeness, ids in judged
    ]
    found = {b.id: b for b in bisects_of(columns)}

    b2 = found["b2"]
    assert [(c.index, c.run_ids, c.likeness) for c in b2.commits] == [
        (0, (1, 2, 3), "good end"), (3, (8,), "like-good"), (4, (5,), "like-good"),
        (5, (7,), "like-bad"), (6, (6,), "like-bad"),
    ]  # fmt: skip
    assert b2.size == 6 and b2.named == COMMITS[5] and b2.state.startswith("named 0505050505")
    assert b2.commits[2].tok_s == columns.values[("spec", "output_tok_s")][5]  # b1's run
    assert found["b1"].named == COMMITS[5]  # b1 as before, from its own runs
