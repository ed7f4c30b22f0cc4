"""The page: everything from the history is escaped, in the HTML and in the embedded JSON;
links are made only from http(s) URLs; the inlined assets are the vendored ones."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfgate.gate import Status, Verdict
from perfgate.report import render_report
from perfgate.report.page import inlinable, script_json
from perfgate.results import RunContext

from .history import HOSTILE, run, stepped_history

STATIC = Path(__file__).resolve().parents[2] / "perfgate" / "report" / "static"


def hostile_history() -> list:  # type: ignore[type-arg]
    """Markup and script in every string the history can hold."""
    history = []
    for i in range(6):
        record = run(
            i,
            scenario=f"scn{HOSTILE}",
            branch=f"feat{HOSTILE}",
            fingerprint={"torch": f"2.{i // 3}{HOSTILE}", f"env.X{HOSTILE}": "1"},
            config={"sweep": f"sw{HOSTILE}", "steps": i % 2 + 1},
        )
        context = RunContext(
            commit=f"c0ffee{HOSTILE}", branch=f"feat{HOSTILE}", pr=f"7{HOSTILE}",
            ci_url="javascript:alert(1)//https://x",
        )  # fmt: skip
        verdict = Verdict("output_tok_s", Status.REGRESSION, f"slower {HOSTILE}", 1.0, 0.9, -0.1)
        history.append(replace(record, id=i + 1, context=context, verdicts=(verdict,)))
    return history


def embedded_json(html: str) -> dict:  # type: ignore[type-arg]
    found = re.search(
        r'<script type="application/json" id="perfgate-data">(.*?)</script>', html, re.S
    )
    assert found is not None
    return json.loads(found.group(1))


def test_markup_and_script_from_the_history_never_reach_the_page_as_markup() -> None:
    html = render_report(hostile_history(), repository="javascript:alert(2)")
    assert "<script>window.__pwned" not in html
    assert "<b>x</b>" not in html
    assert html.count("<script") == 3  # the data, uPlot, the report's own script
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert not re.search(r"""href=["']?\s*javascript:""", html, re.I)
    data = embedded_json(html)
    assert data["repository"] is None and data["runs"]["ci"] == [None] * 6
    assert data["branches"] == [f"feat{HOSTILE}"]
    assert data["groups"][0]["scenario"] == f"scn{HOSTILE}"
    assert f"2.0{HOSTILE} → 2.1{HOSTILE}" in data["groups"][0]["fingerprints"][0][1]
    assert data["sweeps"][0]["name"] == f"sw{HOSTILE}"


def test_embedded_json_has_no_character_that_could_end_or_break_its_script() -> None:
    html = render_report(hostile_history())
    text = html.split('id="perfgate-data">', 1)[1].split("</script>", 1)[0]
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("</script>", '"\\u003c/script\\u003e"'),
        ("<!--", '"\\u003c!--"'),
        ("a\u2028b\u2029c", '"a\\u2028b\\u2029c"'),
        ("&amp;", '"\\u0026amp;"'),
        ("é", '"é"'),
    ],
)
def test_script_json_escapes_and_round_trips(value: str, expected: str) -> None:
    assert str(script_json(value)) == expected
    assert json.loads(str(script_json(value))) == value


def test_script_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        script_json({"x": float("nan")})


def test_an_asset_that_could_end_its_element_is_refused() -> None:
    for text in ("a='</SCRIPT>'", "/* <!-- */", "x{} </style>"):
        with pytest.raises(ValueError, match="cannot be inlined"):
            inlinable("bad.js", text)
    assert str(inlinable("ok.js", "a < b")) == "a < b"


def test_links_to_commit_pr_and_ci_come_from_the_repository() -> None:
    history = [replace(r, id=i + 1) for i, r in enumerate(stepped_history(runs=6))]
    html = render_report(history, generated_at=datetime(2026, 12, 1, tzinfo=UTC))
    repo = "https://github.com/example/perfgate"
    assert f'href="{repo}/commit/{5:040x}"' in html
    assert f'href="{repo}/actions/runs/1005"' in html
    assert f'href="{repo}/pull/12"' in html  # run 4 is on the feature branch
    assert "Generated 2026-12-01T00:00:00+00:00 from 6 recorded runs" in html


def test_the_vendored_files_are_the_ones_the_readme_names() -> None:
    readme = (STATIC / "README.md").read_text()
    listed = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.M)
    )
    assert set(listed) == {"uPlot.iife.min.js", "uPlot.min.css"}
    for name, digest in listed.items():
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == digest, name
    assert "MIT" in (STATIC / "uPlot.LICENSE").read_text()
    assert (
        "uPlot 1.6.32" in readme and "(v1.6.32)" in (STATIC / "uPlot.iife.min.js").read_text()[:80]
    )


def test_an_empty_history_renders() -> None:
    html = render_report([])
    assert "The history holds no run yet." in html
    assert embedded_json(html)["groups"] == []


@dataclass(frozen=True)
class Shift:
    """Shaped like the gate's per-phase shift (perfgate.gate.attribution.PhaseShift)."""

    phase: str
    baseline_ms: float
    current_ms: float
    share: float | None


@dataclass(frozen=True)
class AttributedVerdict(Verdict):
    """A verdict with an attribution, as the gate gives one for throughput metrics."""

    attribution: Any = None


def test_a_verdicts_attribution_and_interval_are_shown_when_the_gate_gives_them() -> None:
    attribution = SimpleNamespace(
        summary="output_tok_s -7.1%: cycle +2.4 ms/cycle (+10%); verify +2.1 ms/cycle explains 88%",
        cycle=Shift("cycle", 24.0, 26.4, None),
        phases=(Shift("verify", 20.0, 22.1, 0.875), Shift("other", 1.0, 1.3, 0.125)),
    )
    verdict = AttributedVerdict(
        "output_tok_s", Status.REGRESSION, f"slower {HOSTILE}", 100.0, 92.9, -0.071,
        ci_low=-0.09, ci_high=-0.05, tolerance=0.03, attribution=attribution,
    )  # fmt: skip
    record = replace(run(0), id=1, verdicts=(verdict,), status=Status.REGRESSION)
    html = render_report([record])
    assert "verify +2.1 ms/cycle explains 88%" in html
    assert re.search(
        r"<td>verify</td><td class=\"num\">20.000</td><td class=\"num\">22.100</td>", html
    )
    assert "88%" in html and "-9.0% … -5.0%" in html
    plain = render_report([replace(record, verdicts=(Verdict("output_tok_s", Status.PASS, "ok"),))])
    assert "why:" not in plain
