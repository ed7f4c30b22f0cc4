"""What a gate session prints at its end: a verdict table a person reads at a glance, last.

The table's explanations are built from real verdicts (perfgate.gate.judge); the session's
ending comes from the gate suites under pytest with the servers faked (a plugin that gives
each server a result and times its repeats through pytest-benchmark), so its order, pytest's
durations and pytest-benchmark's table are pytest's own.
"""

from __future__ import annotations

import pytest

from perfgate.commands.run import SUITES
from perfgate.gate.attribution import CycleProfile, attribute
from perfgate.gate.judge import judge_runs
from perfgate.gate.verdict import Status, Verdict
from perfgate.verdict_text import EXPLANATION_WIDTH, render_verdicts

from .conftest import REPO, TINY_SCENARIO, write_config

TOLERANCES = {"output_tok_s": 0.25, "verify_ms": 0.35, "accept_length": 0.02, "speedup": 0.25}
# One run each side, as the second `scripts/gate` on a fresh clone has it: every verdict is
# inconclusive, for the same reasons but for each metric's spread within its run.
BASELINE = {
    "output_tok_s": [[949.0, 1000.0, 900.0, 950.0, 960.0]],
    "verify_ms": [[8.3, 8.4, 8.2, 8.5, 8.3]],
    "accept_length": [[2.876] * 5],
    "speedup": [[2.1, 2.2, 2.0, 2.1, 2.15]],
}
CURRENT = {
    "output_tok_s": [[1272.0, 1300.0, 1250.0, 1280.0, 1100.0]],
    "verify_ms": [[7.2, 7.3, 7.1, 7.4, 7.2]],
    "accept_length": [[2.876] * 5],
    "speedup": [[1.3, 1.4, 1.2, 1.35, 1.3]],
}


def test_reasons_several_metrics_share_are_said_once_under_the_table() -> None:
    verdicts = judge_runs(BASELINE, CURRENT, TOLERANCES, list(TOLERANCES), max_runs=1)
    assert {v.status.value for v in verdicts} == {"inconclusive"}
    shared = ("spread between runs unseen", "approve more baseline runs", "the run budget is spent")
    assert all(reason in v.message for v in verdicts for reason in shared)
    lines = render_verdicts(verdicts)
    text = " ".join(" ".join(lines).split())

    rows = lines[1:5]  # one line per metric, in the gated order, nothing between them
    assert [row.split()[0] for row in rows] == list(TOLERANCES)
    assert all(row.split()[-1] == "inconclusive" for row in rows)
    for reason in shared:
        assert text.count(reason) == 1, "\n".join(lines)
    assert "all 4 metrics: spread between runs unseen (one run each side); approve more" in text
    # What the table shows is not said again: the change, its interval, tolerance and runs.
    assert "(interval " not in text and "against a tolerance" not in text
    assert "1 run against 1 approved" not in text
    within = [f"{v.metric} {v.message.split('within runs ')[1].split(';')[0]}" for v in verdicts]
    assert f"spread within runs: {', '.join(within)}" in text
    assert max(len(line) for line in lines[5:]) <= EXPLANATION_WIDTH
    # Under the table: the shared reasons and the spreads (5 lines of 100 columns at most), then
    # the why lines of the two throughput metrics; before, 4 lines of ~300 columns.
    explained = [line for line in lines[5:] if not line.startswith("  why: ")]
    assert len(explained) <= 5 and len(lines) - 5 - len(explained) == 2, "\n".join(lines)


def test_the_metrics_that_share_a_reason_are_named_and_the_why_lines_kept() -> None:
    # Five approved runs a little apart, and tok/s halved: only output_tok_s regresses.
    approved = {
        m: [[x * (1 + 0.002 * r) for x in runs[0]] for r in range(5)]
        for m, runs in BASELINE.items()
    }
    current = {m: [runs[2]] for m, runs in approved.items()}
    current["output_tok_s"] = [[x * 0.5 for x in approved["output_tok_s"][2]]]
    current["speedup"] = [[x * 0.5 for x in approved["speedup"][2]]]
    verdicts = judge_runs(approved, current, TOLERANCES, list(TOLERANCES), max_runs=1)
    failing = [v for v in verdicts if v.status.value not in ("pass", "improvement")]
    assert [v.metric for v in failing] == ["output_tok_s", "speedup"], [v.message for v in verdicts]
    text = " ".join(" ".join(render_verdicts(verdicts)).split())
    assert "output_tok_s, speedup: spread of run medians between runs" in text, text
    assert "why: output_tok_s: unknown, no phase timings on one side" in text
    assert "why: speedup: unknown, no phase timings on one side" in text
    assert "all 4 metrics" not in text


def test_two_throughput_verdicts_of_the_same_runs_say_their_cause_once() -> None:
    # As the second `scripts/gate` on a fresh clone: tok/s and speedup both moved, and both
    # are explained by the same runs' cycle, which the speedup's line used to say again.
    before = CycleProfile({"cycle": 6.6, "verify": 3.3, "draft": 1.7}, accept_length=2.876)
    after = CycleProfile({"cycle": 7.9, "verify": 3.8, "draft": 2.2}, accept_length=2.876)
    slower = CycleProfile({"cycle": 9.0, "verify": 5.0, "draft": 1.7}, accept_length=2.876)

    def verdict(
        metric: str, change: float, current: CycleProfile, tok_s: tuple[float, float] | None = None
    ) -> Verdict:
        why = attribute(metric, change, before, current, tok_s)
        return Verdict(
            metric, Status.REGRESSION, "", baseline=1.0, current=1.0 + change, change=change,
            ci_low=change - 0.01, ci_high=change + 0.01, tolerance=0.05, attribution=why,
        )  # fmt: skip

    tok_s = verdict("output_tok_s", -0.192, after)
    speedup = verdict("speedup", -0.04, after, (-0.192, -0.159))
    text = " ".join(" ".join(render_verdicts([tok_s, speedup])).split())
    assert tok_s.attribution is not None and f"why: {tok_s.attribution.summary}" in text, text
    assert text.count("explains") == 2 and text.count("accept length unchanged") == 1, text
    assert (
        "why: speedup -4.0%: spec tok/s -19.2%, plain tok/s -15.9%; cycle and accept length as"
        " for output_tok_s" in text
    ), text
    # Another cause (other runs' cycle) is said in full.
    other = verdict("speedup", -0.04, slower, (-0.25, -0.159))
    text = " ".join(" ".join(render_verdicts([tok_s, other])).split())
    assert other.attribution is not None and f"why: {other.attribution.summary}" in text, text
    assert "as for" not in text, text


def test_no_cell_of_the_table_runs_into_the_next_one() -> None:
    """A server slowed a hundredfold: a five-digit change and a 19-column interval."""
    slowed = Verdict(
        "verify_ms", Status.REGRESSION, "", baseline=1.783, current=203.275, change=113.0,
        ci_low=97.048, ci_high=118.14, tolerance=0.6, runs=1, baseline_runs=2,
    )  # fmt: skip
    same = Verdict(
        "accept_length", Status.PASS, "", baseline=2.182, current=2.182, change=0.0,
        ci_low=-0.001, ci_high=0.001, tolerance=0.05, runs=1, baseline_runs=2,
    )  # fmt: skip
    header, *rows = render_verdicts([slowed, same])[:3]
    assert rows[0].split() == [
        "verify_ms", "1.783", "203.275", "+11300.0%", "+9704.8%..+11814.0%", "60%", "1/2",
        "regression",
    ], rows[0]  # fmt: skip
    assert rows[1].split() == [
        "accept_length", "2.182", "2.182", "+0.0%", "-0.1%..+0.1%", "5%", "1/2", "pass",
    ]  # fmt: skip
    # The columns line up with their headers: right-aligned figures end under their header's
    # end, the interval starts under its header, the verdict too.
    for column, cell in [("current", "203.275"), ("change", "+11300.0%"), ("runs", "1/2")]:
        assert rows[0].index(cell) + len(cell) == header.index(column) + len(column), column
    assert rows[0].index("+9704.8%") == rows[1].index("-0.1%") == header.index("interval")
    assert rows[0].index("regression") == rows[1].index("pass") == header.index("verdict")


FAKE_SERVERS = '''
"""Every server of the session faked: a result per mode, its repeats timed as a real one's."""
import functools

from perfgate import session
from perfgate.pipeline import ServerPair
from tests.factories import mode_result


def launch(scenario, mode, folder, *, timed_loop, checked, progress, while_up):
    timed_loop(lambda: None, scenario.repeats)
    return mode_result(mode, 100.0 if mode == "plain" else 120.0, repeats=scenario.repeats)


def pytest_configure(config):
    session.ServerPair = functools.partial(ServerPair, launch=launch)
'''


@pytest.mark.slow
@pytest.mark.parametrize("asked", [(), ("-v",)])
def test_the_verdict_is_the_last_thing_a_session_prints(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, asked: tuple[str, ...]
) -> None:
    # The project's own pytest options ask for the slowest durations, as perfgate's do.
    pytester.makeini("[pytest]\naddopts = --durations=25 -ra\n")
    pytester.makepyfile(fakeservers=FAKE_SERVERS)
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{REPO}")
    config = write_config(pytester.path, TINY_SCENARIO)
    result = pytester.runpytest_subprocess(
        str(SUITES), f"--perfgate-config={config}", "--perfgate-report=", "-p", "fakeservers",
        "-p", "no:cacheprovider", *asked,
    )  # fmt: skip
    result.assert_outcomes(passed=6)
    lines = [line for line in result.stdout.lines if line.strip()]
    section = next(i for i, line in enumerate(lines) if "= perfgate =" in line)
    assert lines[section + 1].startswith("tiny on ") and "run #1 PASS" in lines[section + 1]
    assert lines[-1] == "perfgate exit code: 0", "\n".join(lines)
    assert "passed in" in lines[section - 1], "\n".join(lines)  # pytest's own ending before it
    out = result.stdout.str()
    assert ("slowest 25 durations" in out) == bool(asked), out
    assert ("benchmark: 2 tests" in out) == bool(asked), out
