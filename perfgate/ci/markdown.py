"""The gate's verdicts as GitHub-flavoured markdown: the job summary and the PR comment.

Both are built from blocks (headline, one row per scenario, one section per scenario) and
kept under GitHub's size limits by leaving whole blocks out from the end, never cutting a
table or a character in two: a step summary above 1 MiB is not shown at all (the runner
logs "supports content up to a size of 1024k"), and a PR comment holds 65,536 characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfgate.ci.pointer import SessionPointer
from perfgate.errors import ExitCode
from perfgate.gate.verdict import Status, Verdict, runs_phrase
from perfgate.results import RunRecord

SUMMARY_LIMIT_BYTES = 1_000_000  # under the 1 MiB (1024k) a step summary may hold
COMMENT_LIMIT_BYTES = 60_000  # under the 65,536 characters of a comment, in any script
REST = "see the report and `perfgate history show ID`."
COMMENT_MARKER = "<!-- perfgate-gate -->"  # how the workflow finds its own comment again

OUTCOMES = {
    ExitCode.PASS: ("✅", "pass"),
    ExitCode.REGRESSION: ("❌", "regression"),
    ExitCode.BAD_INPUT: ("⛔", "bad input"),
    ExitCode.INFRASTRUCTURE: ("⛔", "infrastructure failure"),
    ExitCode.INCONCLUSIVE: ("⚠️", "inconclusive"),
    ExitCode.INTERNAL: ("⛔", "perfgate failed (a bug)"),
}
VERDICT_MARKS = {Status.REGRESSION: "❌", Status.IMPROVEMENT: "⬆️", Status.PASS: "✅"}


@dataclass(frozen=True)
class Links:
    """Where the reader finds more: the CI run (and its artifacts) and the commit."""

    run_url: str | None = None
    commit: str | None = None


def cell(text: object) -> str:
    """Text safe inside a table cell: no pipes, no line breaks, no HTML."""
    shown = str(text).replace("\r", " ").replace("\n", " ")
    return shown.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def code(text: object) -> str:
    """Text shown as it is, as an inline code span: GitHub renders no mention, link, image or
    HTML inside one. Line breaks become spaces; the fence outgrows any backticks in the text."""
    shown = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or not shown else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def link(label: str, url: str) -> str:
    """`[label](url)` for a plain http(s) address; anything else is shown as code, not linked."""
    if re.fullmatch(r"https?://[^\s()<>\[\]`'\"\\]+", url):
        return f"[{label}]({url})"
    return f"{label} {code(url)}"


def outcome(exit_code: int) -> str:
    try:
        mark, word = OUTCOMES[ExitCode(exit_code)]
    except ValueError:
        return f"⛔ pytest ended with code {exit_code}"
    return f"{mark} {word}"


def _number(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def verdict_row(v: Verdict) -> str:
    interval = (
        "–" if v.ci_low is None or v.ci_high is None else f"{v.ci_low:+.1%} … {v.ci_high:+.1%}"
    )
    tolerance = "–" if v.tolerance is None else f"{v.tolerance:.0%}"
    runs = "–" if v.runs is None else f"{v.runs}/{v.baseline_runs}"
    mark = VERDICT_MARKS.get(v.status, "⚠️")
    return (
        f"| `{cell(v.metric)}` | {_number(v.baseline, '.4g')} | {_number(v.current, '.4g')} | "
        f"{_number(v.change, '+.1%')} | {interval} | {tolerance} | {runs} | "
        f"{mark} {v.status.value} |"
    )


def _explanations(verdicts: Sequence[Verdict]) -> list[str]:
    lines = []
    for v in verdicts:
        if v.status not in (Status.PASS, Status.IMPROVEMENT):
            lines.append(f"- `{cell(v.metric)}` {v.status.value}: {cell(v.message)}")
        if v.says_why:
            why = (
                v.attribution.summary if v.attribution else "unknown: no phase timings on one side"
            )
            lines.append(f"- **why** `{cell(v.metric)}` moved: {cell(why)}")
    return lines


def _plain_line(record: RunRecord) -> str:
    reused = record.measurement.plain.reused_from
    return "measured" if reused is None else f"reused from run #{reused}"


def _judged_with(record: RunRecord) -> str:
    earlier = next((v.with_runs for v in record.verdicts if v.with_runs), ())
    return f" (judged with {', '.join(f'#{i}' for i in earlier)})" if earlier else ""


def scenario_section(record: RunRecord) -> str:
    """One scenario's final run: its verdict table, explanations and equivalence."""
    m = record.measurement
    lines = [
        f"### {cell(m.scenario)} on {cell(m.profile)}: run #{record.id}{_judged_with(record)} — "
        f"{record.status.value}",
        "",
    ]
    if record.judged_against:
        lines += [cell(record.judged_against[0].upper() + record.judged_against[1:]) + ".", ""]
    if record.verdicts:
        lines += [
            "| metric | baseline | current | change | interval | tolerance | runs | verdict |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
            *(verdict_row(v) for v in record.verdicts),
            "",
        ]
    elif not record.judged_against:
        lines += ["No verdicts.", ""]
    lines += _explanations(record.verdicts)
    cost = runs_phrase(record.verdicts)
    lines += [f"- runs: {cell(cost)}"] if cost else []
    lines.append(f"- equivalence: {'✅' if m.outputs_pass else '❌'} {cell(m.equivalence_line())}")
    lines.append(f"- plain twin: {_plain_line(record)}")
    return "\n".join(lines) + "\n"


def overview(pointer: SessionPointer, finals: Sequence[RunRecord]) -> list[str]:
    """The table of scenarios (one row each) and the scenarios that were not measured."""
    blocks = []
    if finals:
        rows = [
            "| scenario | profile | run | status | equivalence | plain twin |",
            "| --- | --- | ---: | --- | --- | --- |",
        ]
        for r in finals:
            m = r.measurement
            rows.append(
                f"| {cell(m.scenario)} | {cell(m.profile)} | #{r.id} | {r.status.value} | "
                f"{'✅' if m.outputs_pass else '❌'} {cell(m.equivalence_line())} | "
                f"{_plain_line(r)} |"
            )
        blocks.append("\n".join(rows) + "\n")
    for error in pointer.errors:
        where = f"{cell(error.scenario)}: not measured" if error.scenario else "perfgate"
        blocks.append(f"- ⛔ **{where}** (exit {error.exit_code}): {cell(error.message)}\n")
    return blocks


def headline(exit_code: int | None, links: Links) -> str:
    state = "⛔ no verdict" if exit_code is None else outcome(exit_code)
    code = "" if exit_code is None else f" (exit {exit_code})"
    where = []
    if links.commit:
        where.append(f"commit `{links.commit[:12]}`")
    if links.run_url:
        where.append(f"[run, report and logs]({links.run_url})")
    tail = f"\n\n{' · '.join(where)}" if where else ""
    return f"## perfgate: {state}{code}{tail}\n"


def no_session_blocks() -> list[str]:
    return [
        "The gate suites left no session (`.perfgate/last-session.json`): they did not run, or "
        "pytest itself failed. The pre-flight (`perfgate doctor`) or the step log says why.\n"
    ]


def render_markdown(
    pointer: SessionPointer | None,
    finals: Sequence[RunRecord],
    links: Links,
    limit_bytes: int,
    notes: Sequence[str] = (),
    comment: bool = False,
) -> str:
    """The summary (or, with `comment`, the PR comment) within `limit_bytes` of UTF-8."""
    head = (COMMENT_MARKER + "\n" if comment else "") + headline(
        pointer.exit_code if pointer else None, links
    )
    blocks = overview(pointer, finals) if pointer else no_session_blocks()
    blocks += [f"> {cell(note)}\n" for note in notes]
    blocks += [scenario_section(r) for r in finals]
    if pointer is not None and pointer.history:
        blocks.append(f"History: `{cell(pointer.history)}`\n")
    return fit_blocks(head, blocks, limit_bytes)


def fit_blocks(head: str, blocks: Sequence[str], limit_bytes: int) -> str:
    """`head` and as many whole `blocks` as fit in `limit_bytes`, then a note on the rest."""
    out, used = [head], _size(head)
    for index, block in enumerate(blocks):
        left = len(blocks) - index
        note = f"\n_{left} more section(s) left out to stay within GitHub's size limit: {REST}_\n"
        if used + _size("\n" + block) + _size(note) > limit_bytes:
            out.append(note if used + _size(note) <= limit_bytes else "")
            break
        out.append("\n" + block)
        used += _size("\n" + block)
    return "".join(out)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def final_records(pointer: SessionPointer, records: Mapping[int, RunRecord]) -> list[RunRecord]:
    """The final run of each scenario the pointer names, in the session's order."""
    return [records[i] for i in pointer.final_runs.values() if i in records]
