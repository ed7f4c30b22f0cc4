"""Printing the report in a real headless Chromium draws every chart at once, without
scrolling, even while the page's timers stand still (so that the charts below the first screen
have not had their turn yet). Each test has a browser of its own: a fake clock holds for every
page of a browser context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfgate.report import write_report

from .chromium import open_report
from .history import stepped_history, sweep_history
from .test_browser import charts, require_chromium

CLOCK_START_MS = 1_800_000_000_000


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of four scenarios and a sweep: most of its charts lie below the first screen."""
    folder = tmp_path_factory.mktemp("print")
    return write_report(folder / "index.html", [*stepped_history(runs=12), *sweep_history()])


def stop_timers(page: Any) -> None:
    """Stop the page's timers before it loads (uPlot draws in microtasks, which still run)."""
    page.clock.install(time=CLOCK_START_MS)
    page.clock.pause_at(CLOCK_START_MS + 60_000)


@pytest.mark.parametrize("printing", ["print media", "pdf"])
def test_printing_draws_every_chart_at_once(report_file: Path, printing: str) -> None:
    require_chromium()
    with open_report(report_file, prepare=stop_timers) as paused:
        before = charts(paused)
        assert any(c["drawn"] for c in before) and not all(c["drawn"] for c in before)
        if printing == "pdf":
            assert paused.page.pdf()[:5] == b"%PDF-"
        else:
            paused.page.emulate_media(media="print")  # its change event comes with the next frame
            paused.page.wait_for_function("window.perfgateReport.complete", timeout=20_000)
        after = charts(paused)
        assert len(after) >= 4 * 4 + 1
        for chart in after:
            assert chart["drawn"] and int(chart["inked"]) > 2000, chart  # type: ignore[call-overload]
        assert paused.page.evaluate("window.scrollY") == 0 and paused.errors == []


def test_a_printed_chart_fits_the_page_it_is_printed_on(report_file: Path) -> None:
    require_chromium()
    # Drawn for a 1280 px screen; timers stopped, so no resize handler draws them again.
    with open_report(report_file, prepare=stop_timers) as report:
        report.page.emulate_media(media="print")
        report.page.wait_for_function("window.perfgateReport.complete", timeout=20_000)
        report.page.set_viewport_size({"width": 700, "height": 1000})  # a page's width
        overflowing = report.page.evaluate(
            """() => [...document.querySelectorAll('[data-chart] canvas')]
                .map(canvas => canvas.getBoundingClientRect())
                .filter(box => box.width < 100 || box.right > document.documentElement.clientWidth)
                .length"""
        )
        assert overflowing == 0 and report.errors == []
