"""Progress of long waits: a live status line on a terminal, one line per step in a log.

On a terminal, a step redraws one status line in place (at most every `LIVE_INTERVAL_S`, cut
to the terminal's width) and ends with one permanent line. Anywhere else (CI logs, pipes,
files, ``TERM=dumb``) a step writes one line when it starts and one when it ends, and a
counted step one line per logged item: no carriage returns, no escape codes, nothing per
second. ``NO_COLOR`` (any non-empty value, https://no-color.org) keeps escape codes off a
terminal too: the live line is then erased with spaces.

Under pytest, `reporter_for_pytest` writes through pytest's terminal with capture suspended,
as pytest's own live logging does; commands write to stderr (`stderr_reporter`), never to a
stdout that carries data.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol

LIVE_INTERVAL_S = 0.25  # a few redraws a second at most
DEFAULT_WIDTH = 80
BAR_WIDTH = 20
LOGGED_SHARE = 10  # a counted step logs about every tenth of its items
ERASE_LINE = "\r\x1b[K"
GREEN, RED, RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"

# CSI sequences (colours, cursor moves), OSC sequences (titles, links), then any other escape.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]")

# A detail, or how to make it: called only when the line that shows it is written.
Detail = str | Callable[[], str]


class Stream(Protocol):
    """Where a reporter writes: a text stream that says whether it is a terminal."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...

    def isatty(self) -> bool: ...


def format_duration(seconds: float) -> str:
    """'0.4 s' under 10 s, '12 s' under a minute, '2 min 05 s' under an hour, then '1 h 02 min'."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def clean_line(text: str) -> str:
    """The last visible line of `text`, without escape codes or control characters.

    Lines end at a newline or a carriage return, so a progress bar that redraws itself (a
    model's weights loading, say) counts from its latest drawing. Runs of spaces become one.
    """
    for line in reversed(re.split(r"[\r\n]", text)):
        visible = " ".join(_CONTROLS.sub(" ", _ESCAPES.sub("", line)).split())
        if visible:
            return visible
    return ""


def fit(text: str, width: int) -> str:
    """Cut `text` to at most `width` characters, ending in '...' where it was cut."""
    if len(text) <= width:
        return text
    return text[: width - 3] + "..." if width > 3 else text[: max(width, 0)]


def render_bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """`done` of `total` as a bar of `width` cells: '[=========>          ]'."""
    filled = width if total <= 0 else width * min(max(done, 0), total) // total
    cells = "=" * filled + (">" if filled < width else "")
    return f"[{cells.ljust(width)}]"


def plural(count: int, unit: str) -> str:
    """'1 repeat', '3 repeats'."""
    return f"{count} {unit}" + ("" if count == 1 else "s")


def is_live(stream: object, environ: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` takes a redrawn status line: a terminal, and TERM is not 'dumb'."""
    environ = os.environ if environ is None else environ
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        tty = False
    return tty and environ.get("TERM") != "dumb"


def terminal_width(stream: object) -> int:
    """The columns of the terminal behind `stream`, else of this process's, else 80."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


class Reporter:
    """Shows the progress of steps on one stream; without a stream, shows nothing.

    `color` allows escape codes (colour, erasing the line); they are used only on a live
    terminal and without ``NO_COLOR``.
    """

    def __init__(
        self,
        stream: Stream | None,
        *,
        color: bool = True,
        width: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = LIVE_INTERVAL_S,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        self.stream = stream
        self.live = stream is not None and is_live(stream, environ)
        self.color = color and self.live and not environ.get("NO_COLOR")
        self.clock = clock
        self.interval_s = interval_s
        self._width = width or (lambda: terminal_width(stream))
        self._open: list[Step] = []
        self._drawn = 0  # characters of the live line on screen; 0: none
        self._drawn_at = -math.inf

    def step(
        self, title: str, *, total: int | None = None, unit: str = "item", log_every: int = 0
    ) -> Step:
        """Start a step: use it as a context manager, or end it with `done` or `fail`.

        With `total`, it counts `unit`s (`advance`); a log gets a line for its first, its
        last and every `log_every`-th (default: about every tenth), instead of a start line.
        """
        every = log_every or max(1, math.ceil((total or 0) / LOGGED_SHARE))
        step = Step(self, title, total, unit, every)
        if self.stream is None:
            return step
        self._open.append(step)
        if total is not None:
            return step  # its first item draws or logs it
        if self.live:
            self._draw(step, force=True)
        else:
            self._line(title)
        return step

    def note(self, text: str) -> None:
        """Write a permanent line (above the live line, which stays)."""
        self._line(text)
        if self._open:
            self._draw(self._open[-1], force=True)

    def _draw(self, step: Step, *, force: bool = False) -> None:
        if not self.live or not self._open or step is not self._open[-1]:
            return  # only the innermost open step shows, and only on a terminal
        now = self.clock()
        if not force and now - self._drawn_at < self.interval_s:
            return
        width = max(self._width(), 20) - 1  # writing the last column wraps on some terminals
        text = fit(step.text(now, bar=True), width)
        self._write(self._erase() + text)
        self._drawn, self._drawn_at = max(len(text), 1), now

    def _line(self, text: str, color: str = "") -> None:
        if self.color and color:
            text = f"{color}{text}{RESET}"
        self._write(self._erase() + text + "\n")
        self._drawn, self._drawn_at = 0, -math.inf  # the next step's first state shows at once

    def _erase(self) -> str:
        if not self._drawn:
            return ""
        return ERASE_LINE if self.color else "\r" + " " * self._drawn + "\r"

    def _end(self, step: Step, line: str, color: str) -> None:
        if step in self._open:
            self._open.remove(step)
        self._line(line, color)
        if self._open:
            self._draw(self._open[-1], force=True)

    def _write(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()


class Step:
    """One long wait: a live line while it lasts, one permanent line when it ends."""

    def __init__(
        self, reporter: Reporter, title: str, total: int | None, unit: str, log_every: int
    ) -> None:
        self.reporter = reporter
        self.title = title
        self.total = total
        self.unit = unit
        self.log_every = log_every
        self.count = 0
        self.started = reporter.clock()
        self.ended = False
        self._detail: Detail = ""

    @property
    def elapsed_s(self) -> float:
        return self.reporter.clock() - self.started

    def update(self, detail: Detail) -> None:
        """Show `detail` on the live line; a log gets nothing."""
        self._detail = detail
        self.reporter._draw(self)

    def advance(self, detail: Detail = "") -> None:
        """Count one more item (the one starting, or the one done: the caller's choice)."""
        self.count += 1
        self._detail = detail
        if self.reporter.live:
            self.reporter._draw(self)
        elif self._logged():
            self.reporter._line(self.text(self.reporter.clock(), bar=False))

    def done(self, outcome: str | None = None) -> None:
        """End the step with `outcome`, by default what it counted and how long it took."""
        took = format_duration(self.elapsed_s)
        if outcome is None:
            counted = self.total is not None
            outcome = f"{plural(self.count, self.unit)} in {took}" if counted else f"done in {took}"
        self._end(outcome, GREEN)

    def fail(self, outcome: str) -> None:
        """End the step with a failure."""
        self._end(outcome, RED)

    def text(self, now: float, *, bar: bool) -> str:
        """The step's status: its item (with a bar on a terminal), elapsed time, detail."""
        parts = []
        if self.total is not None and self.count:
            item = f"{self.unit} {self.count} of {self.total}"
            parts.append(f"{render_bar(self.count, self.total)} {item}" if bar else item)
        parts.append(format_duration(now - self.started))
        detail = self._detail() if callable(self._detail) else self._detail
        if detail:
            parts.append(detail)
        return f"{self.title}: {', '.join(parts)}"

    def _logged(self) -> bool:
        return self.count in (1, self.total) or self.count % self.log_every == 0

    def _end(self, outcome: str, color: str) -> None:
        if not self.ended:
            self.ended = True
            self.reporter._end(self, f"{self.title}: {outcome}", color)

    def __enter__(self) -> Step:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            self.done()
        else:
            self.fail(failure_outcome(error, self.elapsed_s, self._position()))

    def _position(self) -> str:
        if self.total is None or not self.count:
            return ""
        return f" at {self.unit} {self.count} of {self.total}"


def failure_outcome(error: BaseException, elapsed_s: float, position: str = "") -> str:
    """How a step that `error` ended reads: 'failed after 3.0 s: the server exited'."""
    took = format_duration(elapsed_s)
    if isinstance(error, KeyboardInterrupt):
        return f"interrupted{position} after {took}"
    lines = str(error).splitlines()
    return f"failed{position} after {took}: {lines[0] if lines else type(error).__name__}"


SILENT = Reporter(None)


def stderr_reporter() -> Reporter:
    """A reporter on this process's stderr, for commands whose stdout may carry data."""
    return Reporter(sys.stderr)


class PytestTerminal:
    """pytest's terminal as a stream: each write on a line of its own, capture suspended.

    pytest captures fds 1 and 2 during fixtures and tests, so a write must suspend the
    capture to reach the terminal (as pytest's live logging does); and pytest may be halfway
    through a line of test results, which `ensure_newline` ends first.
    """

    def __init__(self, terminal: Any, capture: Any | None) -> None:
        self._terminal = terminal  # the `terminalreporter` plugin
        self._capture = capture  # the `capturemanager` plugin, if capture is on

    def write(self, text: str, /) -> int:
        suspended = (
            self._capture.global_and_fixture_disabled()
            if self._capture is not None
            else contextlib.nullcontext()
        )
        with suspended:
            self._terminal.ensure_newline()
            self._terminal.write(text, flush=True)
        return len(text)

    def flush(self) -> None:
        """Nothing to do: every write flushes."""

    def isatty(self) -> bool:
        return bool(self._terminal.isatty)


def reporter_for_pytest(config: Any) -> Reporter:
    """A reporter on pytest's terminal; silent without one (`-p no:terminal`)."""
    plugins = config.pluginmanager
    terminal = plugins.get_plugin("terminalreporter")
    if terminal is None:
        return SILENT
    return Reporter(
        PytestTerminal(terminal, plugins.get_plugin("capturemanager")),
        color=bool(terminal.hasmarkup),  # pytest's --color, NO_COLOR, PY_COLORS
        width=lambda: int(config.get_terminal_writer().fullwidth),
    )
