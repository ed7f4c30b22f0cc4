"""Open a report in the system's headless Chromium through Playwright (never a downloaded one).

Used by the browser tests and by benchmarks/report_scale.py. The launch is offline: no
sandbox (CI runs as root), no GPU, no QUIC, no background or component-update traffic, a
fresh profile each time; every request the page makes is recorded, so a test can check that
a report fetches nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REQUIRE_ENV = "PERFGATE_REQUIRE_CHROMIUM"
SCREENSHOT_ENV = "PERFGATE_REPORT_SCREENSHOT"
CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The system Chromium ($PERFGATE_CHROMIUM, else Debian's), or None when there is none."""
    configured = os.environ.get("PERFGATE_CHROMIUM")
    for candidate in ([configured] if configured else []) + list(CANDIDATES):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


def why_unavailable() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    if chromium_path() is None:
        return "no Chromium found (apt-get install chromium, or set PERFGATE_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    return None


@dataclass
class ReportPage:
    """An open report: the Playwright page, and what it logged and requested."""

    page: Any
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def console(self, message: Any) -> None:
        """Keep what the page logged as an error (Playwright's console handler)."""
        if message.type == "error":
            self.errors.append(message.text)

    def load_seconds(self) -> float:
        """Load the report afresh; seconds from navigation until the first screen is drawn."""
        began = time.perf_counter()
        self.page.goto(self.url, wait_until="load")
        self.page.wait_for_function("window.perfgateReport && window.perfgateReport.ready")
        return time.perf_counter() - began


@contextmanager
def open_report(
    path: Path,
    width: int = 1280,
    height: int = 900,
    prepare: Callable[[Any], None] | None = None,
) -> Iterator[ReportPage]:
    """Launch Chromium offline on a fresh profile, open the report, yield it.

    `prepare` gets the page before the report loads (to install a fake clock, say).
    """
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError(why_unavailable() or "no Chromium")
    with (
        tempfile.TemporaryDirectory(prefix="perfgate-chromium-") as profile,
        sync_playwright() as p,
    ):
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=executable,
            headless=True,
            args=FLAGS,
            viewport={"width": width, "height": height},
            offline=True,
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            opened = ReportPage(page, path.resolve().as_uri())
            page.on("console", opened.console)
            page.on("pageerror", lambda e: opened.errors.append(str(e)))
            page.on("request", lambda r: opened.requests.append(r.url))
            if prepare is not None:
                prepare(page)
            opened.load_seconds()
            yield opened
        finally:
            context.close()
