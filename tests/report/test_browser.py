"""The report in a real headless Chromium: it opens offline with no error, every chart is
drawn, hovering shows values, legends toggle, drag zooms, the filters work; a screenshot of
the whole page is kept (reports/report-screenshot.png, or $PERFGATE_REPORT_SCREENSHOT).

Skipped, with the reason, without Chromium or Playwright; failed instead when
PERFGATE_REQUIRE_CHROMIUM=1 (CI sets it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from perfgate.report import write_history_report
from perfgate.store import close_history, open_history, record_run
from perfgate.store.models import RunRow

from .chromium import REQUIRE_ENV, SCREENSHOT_ENV, ReportPage, open_report, why_unavailable
from .history import stepped_history, sweep_history
from .test_page import hostile_history

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = 40
TINY = 'section[data-scenario="tiny"]'  # the stepped history's scenario


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report over a stepped history, a sweep and hostile strings, one plain twin reused."""
    folder = tmp_path_factory.mktemp("report")
    sessions = open_history(f"sqlite:///{folder / 'history.db'}")
    with sessions.begin() as session:
        ids = [record_run(session, r) for r in stepped_history(runs=RUNS)]
        for record in [*sweep_history(), *hostile_history()]:
            record_run(session, record)
        reused = {"plain": {"reused_from": ids[-2]}, "spec": {}}
        session.execute(update(RunRow).where(RunRow.id == ids[-1]).values(servers=reused))
    with sessions() as session:
        path = write_history_report(folder / "index.html", session)
    close_history(sessions)
    return path


def require_chromium() -> None:
    """Skip, saying why, where the browser tests cannot run; fail instead where CI needs them."""
    why = why_unavailable()
    if why is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the browser tests cannot run: {why}")
        pytest.skip(f"browser tests skipped: {why}")


@pytest.fixture(scope="module")
def report(report_file: Path) -> Iterator[ReportPage]:
    require_chromium()
    with open_report(report_file) as opened:
        yield opened


def charts(report: ReportPage) -> list[dict[str, object]]:
    """Every chart on the page: its name, whether this build drew it, its inked pixels."""
    result: list[dict[str, object]] = report.page.evaluate(
        """() => [...document.querySelectorAll('[data-chart]')].map(el => {
            const canvas = el.querySelector('canvas');
            let inked = 0;
            if (canvas && canvas.width && canvas.height) {
              const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
              for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) inked++;
            }
            return {name: el.dataset.chart, drawn: el.dataset.drawn === String(window.perfgateReport.build),
                    hidden: el.closest('[hidden]') !== null, inked};
        })"""
    )
    return result


def draw_all(report: ReportPage) -> None:
    report.page.evaluate("window.perfgateReport.drawAll()")
    report.page.wait_for_function("window.perfgateReport.ready")


def test_it_opens_offline_with_no_error_and_runs_no_injected_script(report: ReportPage) -> None:
    assert report.errors == []
    assert report.requests and all(url.startswith("file://") for url in report.requests)
    assert report.page.evaluate("window.__pwned") is None
    assert report.page.evaluate("window.perfgateReport.ready") is True
    # The newest run reused its plain twin's figures: the page says from which run.
    detail = report.page.locator(f"{TINY} .run-detail").inner_text()
    assert f"run #{RUNS}" in detail and f"plain figures reused from run #{RUNS - 1}" in detail
    summary = report.page.locator(f"{TINY} p", has_text="Latest run").inner_text()
    assert f"plain figures reused from run #{RUNS - 1}" in summary


def test_every_chart_is_drawn_and_the_page_is_kept_as_a_screenshot(report: ReportPage) -> None:
    draw_all(report)
    drawn = charts(report)
    names = [c["name"] for c in drawn]
    for expected in ("tok", "speedup", "accept_length", "phases", "spec.verify_ms", "sweep-0"):
        assert expected in names
    # 5 groups (tiny, 3 sweep settings, the hostile scenario) of at least 4 charts, 1 sweep.
    assert len(drawn) >= 5 * 4 + 1
    for chart in drawn:
        assert chart["drawn"] and int(chart["inked"]) > 2000, chart  # type: ignore[call-overload]
    assert report.errors == []
    shot = Path(os.environ.get(SCREENSHOT_ENV) or REPO_ROOT / "reports" / "report-screenshot.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    report.page.evaluate("window.scrollTo(0, 0)")
    report.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


@pytest.fixture
def tab(report: ReportPage) -> Iterator[ReportPage]:
    """A new tab of the same browser, nothing loaded yet: its own timers and scroll."""
    page = report.page.context.new_page()
    opened = ReportPage(page, report.url)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    yield opened
    page.close()


def screens_below(tab: ReportPage) -> float:
    """How many screens down the page's lowest chart begins."""
    return float(
        tab.page.evaluate(
            """() => Math.max(...[...document.querySelectorAll('[data-chart]')].map(
                el => el.getBoundingClientRect().top)) / window.innerHeight"""
        )
    )


def test_every_chart_draws_after_load_without_scrolling(tab: ReportPage) -> None:
    tab.page.goto(tab.url, wait_until="load")
    tab.page.wait_for_function("window.perfgateReport.complete", timeout=20_000)
    assert screens_below(tab) > 3  # the charts lie far below the first screen
    drawn = charts(tab)
    assert len(drawn) >= 5 * 4 + 1
    for chart in drawn:
        assert chart["drawn"] and int(chart["inked"]) > 2000, chart  # type: ignore[call-overload]
    assert tab.page.evaluate("window.scrollY") == 0 and tab.errors == []


def over(report: ReportPage, chart: str, fraction: float = 0.5) -> dict[str, float]:
    """The plotting area of the stepped scenario's chart of that name, scrolled into view."""
    area = report.page.locator(f'{TINY} [data-chart="{chart}"] .u-over')
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    assert box is not None
    return {**box, "x": box["x"] + box["width"] * fraction, "y": box["y"] + box["height"] / 2}


def test_hovering_a_chart_shows_the_runs_values_and_its_details(report: ReportPage) -> None:
    box = over(report, "tok", 0.25)
    report.page.mouse.move(box["x"], box["y"])
    legend = report.page.locator(f'{TINY} [data-chart="tok"] .u-legend .u-series').first
    values = report.page.locator(f'{TINY} [data-chart="tok"] .u-legend .u-value').all_inner_texts()
    assert re.fullmatch(r"#\d+ \d{4}-\d\d-\d\d \d\d:\d\d", values[0]), values
    assert re.fullmatch(r"\d+\.\d+", values[1]), values  # spec tok/s of the hovered run
    assert legend.is_visible()
    detail = report.page.locator(f"{TINY} .run-detail")
    assert re.search(r"run #\d+ · \d{4}-", detail.inner_text()), detail.inner_text()
    assert detail.locator("a", has_text="CI run").count() == 1
    assert detail.locator("a", has_text=re.compile("^[0-9a-f]{12}$")).count() == 1


def test_a_legend_entry_toggles_its_series(report: ReportPage) -> None:
    entry = report.page.locator(f'{TINY} [data-chart="tok"] .u-legend .u-series').nth(2)  # plain
    entry.scroll_into_view_if_needed()
    entry.locator(".u-label").click()
    assert "u-off" in (entry.get_attribute("class") or "")
    entry.locator(".u-label").click()
    assert "u-off" not in (entry.get_attribute("class") or "")


def x_range(report: ReportPage, chart: str) -> list[float]:
    """The x range shown by the stepped scenario's chart of that name."""
    return report.page.evaluate(  # type: ignore[no-any-return]
        """name => {
            const c = window.perfgateReport.charts.find(
                c => c.group && c.group.scenario === 'tiny' && c.el.dataset.chart === name);
            return [c.plot.scales.x.min, c.plot.scales.x.max];
        }""",
        chart,
    )


def test_dragging_zooms_every_chart_of_the_scenario_and_double_click_zooms_out(
    report: ReportPage,
) -> None:
    before = x_range(report, "tok")
    box = over(report, "tok", 0.3)
    report.page.mouse.move(box["x"], box["y"])
    report.page.mouse.down()
    report.page.mouse.move(box["x"] + box["width"] * 0.3, box["y"], steps=8)
    report.page.mouse.up()
    zoomed = x_range(report, "tok")
    assert before[0] < zoomed[0] < zoomed[1] < before[1]
    assert x_range(report, "speedup") == zoomed  # the scenario's other charts follow
    report.page.mouse.dblclick(box["x"], box["y"])
    assert x_range(report, "tok") == before


def test_filters_select_runs_and_rebuild_the_charts(report: ReportPage) -> None:
    page = report.page
    page.select_option("#filter-branch", "feature/x")
    page.wait_for_function("window.perfgateReport.ready")
    assert page.locator(f"{TINY} [id^=kept-]").inner_text() == f"{RUNS // 5} of {RUNS} runs shown"
    page.select_option("#filter-branch", "")
    page.select_option("#filter-scenario", "tiny")
    page.wait_for_function("window.perfgateReport.ready")
    assert page.locator("section.group[hidden]").count() == 4
    page.select_option("#filter-x", "time")
    page.select_option("#filter-phases", "share")
    draw_all(report)
    assert page.evaluate("window.perfgateReport.charts[0].plot.scales.x.time") is True
    assert (
        page.locator('[data-chart="phases"] .u-title')
        .inner_text()
        .startswith("where the cycle goes: % of each cycle")
    )
    assert all(c["drawn"] for c in charts(report) if not c["hidden"])
    assert report.errors == []
    for name, value in (("scenario", ""), ("x", "order"), ("phases", "ms")):
        page.select_option(f"#filter-{name}", value)
