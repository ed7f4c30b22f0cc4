"""The report as one HTML file: the template, the data as script-safe JSON, inlined assets."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from perfgate import metrics
from perfgate.report.bisects import Bisect
from perfgate.report.chart_data import Group
from perfgate.report.links import commit_url, pull_url, safe_url
from perfgate.report.plans import Plan
from perfgate.report.sweeps import Sweep
from perfgate.results import RunRecord
from perfgate.store.columns import RunFacts

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("perfgate.report", "templates"),
    autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    undefined=jinja2.StrictUndefined,
)
RECENT_RUNS = 15  # rows of each scenario's run table (the charts hold them all)
DIVERGENCES_SHOWN = 10

# In a <script> element's text, these would end the element, open a comment that swallows
# the next </script>, or end a JavaScript string before ES2019: written as JSON escapes.
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028"}
_SCRIPT_UNSAFE["\u2029"] = "\\u2029"
_SCRIPT_UNSAFE_PATTERN = re.compile("[<>&\u2028\u2029]")


def script_json(value: Any) -> Markup:
    """JSON to place inside <script type="application/json">: no <, >, & or U+2028/2029 in it.

    Escaped so that history data can never end the script element (``</script>``), start an
    HTML comment (``<!--``), or break a parser that reads the text as JavaScript.

    >>> str(script_json({"branch": "</script><!--"}))
    '{"branch":"\\\\u003c/script\\\\u003e\\\\u003c!--"}'
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Markup(_SCRIPT_UNSAFE_PATTERN.sub(lambda m: _SCRIPT_UNSAFE[m.group()], text))


@cache
def static_text(name: str) -> Markup:
    """A vendored or own asset from perfgate/report/static/, to inline in the page."""
    text = resources.files("perfgate.report").joinpath("static", name).read_text("utf-8")
    return inlinable(name, text)


def inlinable(name: str, text: str) -> Markup:
    """The text of a script or stylesheet, checked safe to place inside its element.

    Raises ValueError when it holds what would end the element early or open a comment.
    """
    lowered = text.lower()
    if "</script" in lowered or "</style" in lowered or "<!--" in lowered:
        raise ValueError(f"{name} cannot be inlined: it holds </script, </style or <!--")
    return Markup(text)


@dataclass(frozen=True)
class Page:
    """What the template needs besides the payload."""

    groups: Sequence[Group]
    latest: Mapping[tuple[str, str], RunRecord]
    payload: Mapping[str, Any]
    sweeps: Sequence[Sweep]
    repository: str | None
    generated_at: datetime
    selection: str = ""  # which runs the report is narrowed to, in words; "" for all
    bisects: Sequence[Bisect] = ()
    plans: Sequence[Plan] = ()


def render_page(page: Page) -> str:
    """The whole HTML document."""
    return _ENV.get_template("report.html.j2").render(
        groups=[_group_view(page, i, group) for i, group in enumerate(page.groups)],
        runs_total=sum(len(g.runs) for g in page.groups),
        scenarios=sorted({g.scenario for g in page.groups}),
        profiles=sorted({g.profile for g in page.groups}),
        branches=page.payload["branches"],
        sweeps=page.sweeps,
        bisects=[_bisect_view(b, page.repository) for b in page.bisects],
        plans=page.plans,
        repository=page.repository,
        selection=page.selection,
        generated_at=page.generated_at.isoformat(timespec="seconds"),
        data=script_json(page.payload),
        uplot_js=static_text("uPlot.iife.min.js"),
        uplot_css=static_text("uPlot.min.css"),
        report_js=static_text("report.js"),
        report_css=static_text("report.css"),
    )


def _group_view(page: Page, index: int, group: Group) -> dict[str, Any]:
    latest = page.latest.get((group.scenario, group.profile))
    payload = page.payload["groups"][index]
    newest = group.runs[-1]
    previous = group.runs[-2].fingerprint if len(group.runs) > 1 else newest.fingerprint
    return {
        "index": index,
        "scenario": group.scenario,
        "profile": group.profile,
        "facts": newest,
        "record": latest,
        "links": run_links(newest, page.repository),
        "verdicts": [_verdict_view(v) for v in latest.verdicts] if latest else [],
        "divergences": _divergences(latest),
        "phases": phase_rows(latest) if latest else [],
        "fingerprint": sorted(newest.fingerprint.items()),
        "changed_fields": {
            k for k in newest.fingerprint if newest.fingerprint.get(k) != previous.get(k)
        },
        "fingerprint_changes": [
            (group.runs[pos].id, text) for pos, text in payload["fingerprints"][-10:]
        ],
        "change_points": _change_point_rows(group, payload),
        "recent": [(run, run_links(run, page.repository)) for run in group.runs[-RECENT_RUNS:]][
            ::-1
        ],
    }


def _bisect_view(bisect: Bisect, repository: str | None) -> dict[str, Any]:
    return {
        "bisect": bisect,
        "rows": [(c, commit_url(repository, c.commit)) for c in bisect.commits],
    }


def run_links(run: RunFacts, repository: str | None) -> dict[str, str | None]:
    """The run's commit, pull request and CI links: each None where unknown or unsafe."""
    return {
        "commit": commit_url(repository, run.commit),
        "pr": pull_url(repository, run.pr),
        "ci": safe_url(run.ci_url),
    }


def _verdict_view(verdict: Any) -> dict[str, Any]:
    # Confidence intervals and attribution are read when the gate provides them.
    attribution = getattr(verdict, "attribution", None)
    return {"verdict": verdict, "attribution": attribution}


def _divergences(record: RunRecord | None) -> list[Any]:
    if record is None:
        return []
    return list(record.measurement.equivalence.mismatches[:DIVERGENCES_SHOWN])


def phase_rows(run: RunRecord) -> list[dict[str, float | str]]:
    """Mean ms per cycle of each phase of the speculative server, `other` included."""
    means: dict[str, float] = {}
    for phase in (*metrics.NAMED_PHASES, metrics.CYCLE):
        values = [p.mean_ms for p in run.measurement.spec.phases if p.phase == phase]
        if values:
            means[phase] = sum(values) / len(values)
    cycle = means.pop(metrics.CYCLE, 0.0)
    if not cycle:
        return []
    means[metrics.OTHER] = max(cycle - sum(means.values()), 0.0)
    rows: list[dict[str, float | str]] = [
        {"phase": phase, "ms": ms, "share": ms / cycle} for phase, ms in means.items()
    ]
    return [*rows, {"phase": metrics.CYCLE, "ms": cycle, "share": 1.0}]


def _change_point_rows(group: Group, payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The change points of every series, newest first, as table rows."""
    rows = []
    for key, changes in payload["changes"].items():
        for pos, before, after, p_value in changes:
            run = group.runs[pos]
            rows.append(
                {
                    "series": key,
                    "run": run,
                    "before": before,
                    "after": after,
                    "change": after / before - 1 if before else None,
                    "p_value": p_value,
                }
            )
    return sorted(rows, key=lambda r: (-r["run"].started_at.timestamp(), r["series"]))
