"""The job summary, PR comment and annotations: content, escaping and GitHub's size limits."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.ci.annotate import session_annotations
from perfgate.ci.markdown import (
    COMMENT_LIMIT_BYTES,
    COMMENT_MARKER,
    SUMMARY_LIMIT_BYTES,
    Links,
    cell,
    fit_blocks,
    outcome,
    render_markdown,
)
from perfgate.ci.pointer import SessionError, SessionPointer, load_pointer, write_pointer
from perfgate.ci.workflow_commands import Annotation, escape_property, limit_annotations
from perfgate.errors import ConfigError, ExitCode
from perfgate.gate import CycleProfile, Status, Verdict, attribute
from perfgate.results import RunRecord
from perfgate.verdict_text import render_record

from ..factories import measurement, record
from ..in_process import perfgate_main


def _records(count: int, status: Status = Status.REGRESSION) -> list[RunRecord]:
    return [
        replace(record(measurement(f"scenario-{i:04d}"), status), id=i + 1) for i in range(count)
    ]


def _pointer(records: list[RunRecord], code: int = 1) -> SessionPointer:
    finals = {r.measurement.scenario: int(r.id or 0) for r in records}
    return SessionPointer(code, "sqlite:///h.db", None, "cpu", tuple(finals.values()), finals)


def test_each_documented_exit_code_has_its_own_words_and_others_say_their_number() -> None:
    said = {code: outcome(code) for code in (0, 1, 64, 69, 70, 75, 3)}
    assert said == {
        0: "✅ pass",
        1: "❌ regression",
        64: "⛔ bad input",
        69: "⛔ infrastructure failure",
        70: "⛔ perfgate failed (a bug)",
        75: "⚠️ inconclusive",
        3: "⛔ pytest ended with code 3",
    }


def test_cells_cannot_break_the_table_or_inject_html() -> None:
    assert cell("a|b\nc<!-- x -->") == "a\\|b c&lt;!-- x --&gt;"


def test_blocks_are_left_out_whole_and_the_rest_is_counted() -> None:
    blocks = [f"block {i} é\n" * 10 for i in range(100)]
    text = fit_blocks("# head\n", blocks, 1000)
    assert len(text.encode()) <= 1000
    assert text.count("block") % 10 == 0  # whole blocks only
    kept = text.count("block") // 10
    assert f"_{100 - kept} more section(s) left out" in text


def test_the_summary_of_thousands_of_scenarios_stays_under_one_mebibyte() -> None:
    records = _records(3000)
    summary = render_markdown(_pointer(records), records, Links(), SUMMARY_LIMIT_BYTES)
    assert 0.9 * SUMMARY_LIMIT_BYTES < len(summary.encode()) <= SUMMARY_LIMIT_BYTES
    assert summary.startswith("## perfgate: ❌ regression (exit 1)")
    assert "more section(s) left out to stay within GitHub's size limit" in summary
    comment = render_markdown(
        _pointer(records), records, Links(), COMMENT_LIMIT_BYTES, comment=True
    )
    assert (
        comment.startswith(COMMENT_MARKER + "\n") and len(comment.encode()) <= COMMENT_LIMIT_BYTES
    )


def test_a_small_session_is_shown_whole() -> None:
    records = _records(2, Status.PASS)
    pointer = replace(_pointer(records, 0), errors=(SessionError("big", "GPU 3 is busy", 69),))
    text = render_markdown(
        pointer, records, Links("https://ci/run/1", "f" * 40), SUMMARY_LIMIT_BYTES
    )
    assert text.startswith(
        "## perfgate: ✅ pass (exit 0)\n\ncommit `ffffffffffff` · [run, report and logs](https://ci/run/1)"
    )
    assert "| scenario-0001 | cpu | #2 | pass |" in text
    assert "- ⛔ **big: not measured** (exit 69): GPU 3 is busy" in text
    assert "left out" not in text


def test_annotations_escape_and_keep_within_the_per_step_limit() -> None:
    line = Annotation("error", "50% slower\nsee", "a: b, c", {"file": "x.json"}).render()
    assert line == "::error file=x.json,title=a%3A b%2C c::50%25 slower%0Asee"
    kept = limit_annotations(
        [Annotation("error", str(i)) for i in range(25)] + [Annotation("warning", "w")]
    )
    errors = [a for a in kept if a.level == "error"]
    assert (
        len(errors) == 10
        and errors[-1].message == "16 more error(s) not shown here: see the job summary"
    )
    assert [a.message for a in kept if a.level == "warning"] == ["w"]
    assert escape_property("%") == "%25"


def test_regressions_are_errors_inconclusive_verdicts_warnings() -> None:
    inconclusive = Verdict("verify_ms", Status.INCONCLUSIVE, "too noisy")
    records = _records(1)
    records.append(
        replace(_records(1)[0], id=9, verdicts=(inconclusive,), status=Status.INCONCLUSIVE)
    )
    found = session_annotations(
        _pointer(records[:1]), records, {"scenario-0000": "baselines/cpu/s.json"}
    )
    assert [(a.level, a.title) for a in found] == [
        ("error", "perfgate: scenario-0000 output_tok_s regression"),
        ("warning", "perfgate: scenario-0000 verify_ms inconclusive"),
    ]
    assert found[0].properties == {"file": "baselines/cpu/s.json"}


def test_the_pointer_round_trips_and_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    pointer = _pointer(_records(2))
    path = write_pointer(tmp_path, pointer)
    assert path == tmp_path / ".perfgate" / "last-session.json"
    assert replace(load_pointer(path), finished_at=None) == pointer  # type: ignore[arg-type]
    assert load_pointer(tmp_path / "none.json") is None
    path.write_text(json.dumps({"schema": 99}))
    with pytest.raises(ConfigError, match="is not a schema-1 session pointer"):
        load_pointer(path)
    for broken in ({"schema": 1}, {"schema": 1, "exit_code": 0, "runs": ["x"]}):
        path.write_text(json.dumps(broken))
        with pytest.raises(ConfigError, match="is not a usable session pointer") as caught:
            load_pointer(path)
        assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_each_scenario_says_what_it_was_judged_against() -> None:
    first = replace(
        record(measurement("tiny"), Status.PASS),
        id=1,
        verdicts=(),
        judged_against="first run of tiny on this machine (no reviewed baseline for runner "
        "profile cpu): recorded as the local reference; the next run will be compared with it",
    )
    later = replace(
        record(measurement("other"), Status.PASS),
        id=2,
        judged_against="judged against 1 earlier run on this machine (#1); no reviewed baseline",
    )
    summary = render_markdown(_pointer([first, later], 0), [first, later], Links(), 10_000)
    assert "First run of tiny on this machine (no reviewed baseline for runner profile cpu)" in (
        summary
    )
    assert "Judged against 1 earlier run on this machine (#1); no reviewed baseline." in summary
    assert "No verdicts" not in summary


@pytest.mark.parametrize("status", [Status.REGRESSION, Status.INCONCLUSIVE, Status.PASS])
def test_a_throughput_verdict_that_moved_says_why_even_when_inconclusive(status: Status) -> None:
    # tok/s -98% against a baseline whose runs scattered: the interval may still cross the
    # tolerance (inconclusive), and the reader needs the cause all the more.
    before = CycleProfile({"cycle": 6.0, "verify": 1.1, "draft": 3.0}, accept_length=2.2)
    after = CycleProfile({"cycle": 206.0, "verify": 201.1, "draft": 3.0}, accept_length=2.2)
    why = attribute("output_tok_s", -0.982, before, after)
    verdict = Verdict(
        "output_tok_s", status, "the interval crosses the tolerance", 948.4, 16.6, -0.982,
        ci_low=-0.990, ci_high=-0.253, tolerance=0.6, attribution=why,
    )  # fmt: skip
    (run,) = _records(1, status)
    run = replace(run, verdicts=(verdict,))
    markdown = render_markdown(_pointer([run]), [run], Links(), SUMMARY_LIMIT_BYTES)
    terminal = " ".join(" ".join(render_record(run)).split())  # its lines wrap at 100
    assert why.summary.startswith("output_tok_s -98.2%: cycle +200 ms/cycle")
    assert "verify +200 ms/cycle" in why.summary
    said = status is not Status.PASS
    assert (f"- **why** `output_tok_s` moved: {why.summary}" in markdown) == said, markdown
    assert (f"why: {why.summary}" in terminal) == said, terminal


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (("--out", "nodir/s.md"), "nodir: no such folder, so --out nodir/s.md cannot be written"),
        (("--out", ""), "--out: is empty: it names no file; give --out a file's path"),
        (("--out", "folder"), "folder: is a folder, but --out names a file to write"),
        (("--comment", "--out", "file/c.md"), "file: is a file, so --out file/c.md cannot be"),
    ],
)
def test_a_summary_path_that_cannot_be_written_is_refused_naming_it(
    tmp_path: Path, flags: tuple[str, ...], problem: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("kept")
    done = perfgate_main("ci", "summary", *flags, cwd=tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT, done.stderr
    assert done.stderr.startswith(f"perfgate: error: {problem}") and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]
