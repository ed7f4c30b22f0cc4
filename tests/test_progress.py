"""Progress: a live line on a terminal, one line per step in a log, nothing on stdout data."""

from __future__ import annotations

import re

import pytest

from perfgate.progress import (
    Reporter,
    clean_line,
    fit,
    format_duration,
    is_live,
    plural,
    render_bar,
)

from .conftest import FakeStream

TTY = {"TERM": "xterm"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reporter(tty: bool, environ: dict[str, str] = TTY, width: int = 80) -> Reporter:
    return Reporter(FakeStream(tty), clock=FakeClock(), width=lambda: width, environ=environ)


def written(progress: Reporter) -> str:
    assert isinstance(progress.stream, FakeStream)
    return progress.stream.getvalue()


def screen(text: str) -> list[str]:
    """What a terminal shows: a carriage return goes back to the line's start, ESC [K clears it."""
    lines = []
    for line in text.split("\n"):
        shown = ""
        for part in line.split("\r"):
            if part.startswith("\x1b[K"):
                shown, part = "", part[3:]
            part = re.sub(r"\x1b\[[0-9;]*m", "", part)
            shown = part + shown[len(part) :]
        lines.append(shown.rstrip())
    return lines


def advance_clock(progress: Reporter, seconds: float) -> None:
    assert isinstance(progress.clock, FakeClock)
    progress.clock.now += seconds


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.04, "0.0 s"),
        (0.4, "0.4 s"),
        (9.94, "9.9 s"),
        (9.96, "10 s"),
        (12.4, "12 s"),
        (59.4, "59 s"),
        (125, "2 min 05 s"),
        (3599.4, "59 min 59 s"),
        (3720, "1 h 02 min"),
        (-1, "0.0 s"),
    ],
)
def test_format_duration(seconds: float, expected: str) -> None:
    assert format_duration(seconds) == expected


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("first\nLoading weights\n", "Loading weights"),
        ("Loading weights\n\n  \n", "Loading weights"),
        ("\x1b[32mINFO\x1b[0m  server   started\n", "INFO server started"),
        ("shards:  10%|#  | 1/10\rshards:  50%|#####  | 5/10\r", "shards: 50%|##### | 5/10"),
        ("\x1b]0;title\x07tab\there\x00\n", "tab here"),
        ("", ""),
    ],
    ids=["last-line", "blank-tail", "ansi", "carriage-returns", "osc-and-controls", "empty"],
)
def test_clean_line_is_the_last_visible_line(log: str, expected: str) -> None:
    assert clean_line(log) == expected


def test_fit_bar_and_plural() -> None:
    assert fit("short", 10) == "short"
    assert fit("a long status line", 10) == "a long ..."
    assert len(fit("x" * 500, 79)) == 79
    assert render_bar(0, 10, width=10) == "[>         ]"
    assert render_bar(5, 10, width=10) == "[=====>    ]"
    assert render_bar(10, 10, width=10) == "[==========]"
    assert render_bar(12, 10, width=10) == "[==========]"
    assert (plural(1, "repeat"), plural(3, "repeat")) == ("1 repeat", "3 repeats")


def test_a_terminal_is_live_unless_term_is_dumb() -> None:
    assert is_live(FakeStream(True), {"TERM": "xterm"})
    assert is_live(FakeStream(True), {})
    assert not is_live(FakeStream(True), {"TERM": "dumb"})
    assert not is_live(FakeStream(False), {"TERM": "xterm"})
    assert not is_live(object(), {})


@pytest.mark.parametrize("environ", [TTY, {"TERM": "dumb"}], ids=["not-a-terminal", "term-dumb"])
def test_a_log_gets_one_line_when_a_step_starts_and_one_when_it_ends(
    environ: dict[str, str],
) -> None:
    tty = environ.get("TERM") == "dumb"
    progress = reporter(tty, environ)
    asked: list[int] = []
    with progress.step("tiny: starting spec server") as step:
        for _ in range(50):
            advance_clock(progress, 0.5)
            step.update(lambda: asked.append(1) or "Loading weights")
        step.done(f"ready in {format_duration(step.elapsed_s)}")
    assert (
        written(progress)
        == "tiny: starting spec server\ntiny: starting spec server: ready in 25 s\n"
    )
    assert not asked, "a log never asks for a detail it does not show"


def test_a_log_gets_a_counted_steps_first_last_and_every_tenth_item() -> None:
    progress = reporter(False)
    with progress.step("pretrain", total=1000, unit="step") as step:
        for _ in range(1000):
            advance_clock(progress, 0.1)
            step.advance(lambda: "loss 2.5000")
    lines = written(progress).splitlines()
    assert lines[0] == "pretrain: step 1 of 1000, 0.1 s, loss 2.5000"
    assert lines[1] == "pretrain: step 100 of 1000, 10 s, loss 2.5000"
    assert lines[10] == "pretrain: step 1000 of 1000, 1 min 40 s, loss 2.5000"
    assert lines[11:] == ["pretrain: 1000 steps in 1 min 40 s"]


def test_a_log_gets_every_repeat_of_a_few() -> None:
    progress = reporter(False)
    with progress.step("tiny spec", total=3, unit="repeat") as step:
        for _ in range(3):
            step.advance()
            advance_clock(progress, 2.0)
    assert written(progress).splitlines() == [
        "tiny spec: repeat 1 of 3, 0.0 s",
        "tiny spec: repeat 2 of 3, 2.0 s",
        "tiny spec: repeat 3 of 3, 4.0 s",
        "tiny spec: 3 repeats in 6.0 s",
    ]
    assert "\r" not in written(progress) and "\x1b" not in written(progress)


def test_a_terminal_redraws_one_line_a_few_times_a_second_then_keeps_one() -> None:
    progress = reporter(True)
    with progress.step("tiny: starting spec server") as step:
        for tenths in range(1, 11):
            advance_clock(progress, 0.1)
            step.update(f"log line {tenths}")
        step.done("ready in 1.0 s")
    text = written(progress)
    redraws = text.count("\r\x1b[K")
    assert redraws == 4, text  # 10 updates over 1 s, one per 0.25 s at most, then the end
    assert "log line 3" in text and "log line 2" not in text
    assert screen(text) == ["tiny: starting spec server: ready in 1.0 s", ""]
    assert text.endswith("\x1b[32mtiny: starting spec server: ready in 1.0 s\x1b[0m\n")


def test_a_terminal_line_is_cut_to_its_width() -> None:
    progress = reporter(True, width=40)
    with progress.step("tiny: starting spec server") as step:
        advance_clock(progress, 1.0)
        step.update("x" * 200)
        shown = screen(written(progress))[-1]
        assert len(shown) == 39 and shown.endswith("...")
        step.done()


def test_a_terminal_counted_step_shows_a_bar() -> None:
    progress = reporter(True)
    with progress.step("pretrain", total=10, unit="step") as step:
        for _ in range(5):
            advance_clock(progress, 1.0)
            step.advance("loss 3.1000")
        assert screen(written(progress))[-1] == (
            "pretrain: [==========>         ] step 5 of 10, 5.0 s, loss 3.1000"
        )
        for _ in range(5):
            step.advance()
    assert screen(written(progress))[-2] == "pretrain: 10 steps in 5.0 s"


def test_no_color_keeps_escape_codes_off_the_terminal() -> None:
    progress = reporter(True, {"TERM": "xterm", "NO_COLOR": "1"})
    with pytest.raises(RuntimeError), progress.step("tiny: starting spec server") as step:
        step.update("Loading weights")
        advance_clock(progress, 3.0)
        raise RuntimeError("the server exited")
    text = written(progress)
    assert "\x1b" not in text and "\r" in text
    assert screen(text) == ["tiny: starting spec server: failed after 3.0 s: the server exited", ""]


def test_an_empty_no_color_does_not_count() -> None:
    assert reporter(True, {"TERM": "xterm", "NO_COLOR": ""}).color
    assert not reporter(False, {"NO_COLOR": ""}).color


def test_an_interrupted_counted_step_says_where() -> None:
    progress = reporter(False)
    with (
        pytest.raises(KeyboardInterrupt),
        progress.step("tiny spec", total=5, unit="repeat") as step,
    ):
        step.advance()
        step.advance()
        advance_clock(progress, 1.0)
        raise KeyboardInterrupt
    assert (
        written(progress).splitlines()[-1] == "tiny spec: interrupted at repeat 2 of 5 after 1.0 s"
    )


def test_a_note_goes_above_the_live_line_which_stays() -> None:
    progress = reporter(True)
    with progress.step("tiny-sweep: starting spec server") as step:
        step.update("Loading weights")
        progress.note("[1/6] steps=1: 110.0 tok/s")
        assert screen(written(progress)) == [
            "[1/6] steps=1: 110.0 tok/s",
            "tiny-sweep: starting spec server: 0.0 s, Loading weights",
        ]
        step.done("ready in 0.0 s")


def test_an_inner_steps_end_shows_the_outer_step_again() -> None:
    progress = reporter(True)
    with progress.step("outer") as outer:
        outer.update("waiting")
        with progress.step("inner"):
            pass
        assert screen(written(progress)) == ["inner: done in 0.0 s", "outer: 0.0 s, waiting"]


def test_without_a_stream_nothing_is_written_or_kept() -> None:
    progress = Reporter(None)
    with progress.step("tiny spec", total=3, unit="repeat") as step:
        step.advance()
        progress.note("a note")
    assert not progress.live and progress._open == []


def test_progress_reaches_pytests_terminal_through_capture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from perfgate.progress import reporter_for_pytest

        @pytest.fixture
        def started(request):
            with reporter_for_pytest(request.config).step("tiny: starting spec server") as step:
                print("captured, not shown")
                step.done("ready in 1 s")

        def test_repeats(request, started):
            progress = reporter_for_pytest(request.config)
            with progress.step("tiny spec", total=2, unit="repeat") as step:
                step.advance()
                step.advance()
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "tiny: starting spec server",
            "tiny: starting spec server: ready in 1 s",
            "tiny spec: repeat 1 of 2, *",
            "tiny spec: repeat 2 of 2, *",
            "tiny spec: 2 repeats in *",
        ]
    )
    result.stdout.no_fnmatch_line("*captured, not shown*")
    assert "\r" not in result.stdout.str()
