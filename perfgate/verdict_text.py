"""Verdicts as text and as JSON: the table printed at the end of a run, and `--json`."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from perfgate.errors import ExitCode, PerfgateError
from perfgate.gate.verdict import Status, Verdict, runs_phrase
from perfgate.results import RunRecord


class FinishedSession(Protocol):
    """What a gate session (perfgate.session.GateSession) tells once it has finished."""

    @property
    def profile(self) -> str: ...
    @property
    def history_url(self) -> str: ...
    @property
    def report_path(self) -> Path | None: ...
    @property
    def report_written(self) -> bool: ...
    @property
    def exit_code(self) -> ExitCode: ...
    @property
    def records(self) -> Sequence[RunRecord]: ...

    def final_records(self) -> list[RunRecord]: ...

    def errors(self) -> dict[str, PerfgateError]: ...

    @property
    def internal_errors(self) -> Sequence[PerfgateError]: ...

    def plain_note(self, name: str) -> str | None: ...

    def judged_locally(self, name: str) -> bool: ...


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _interval(v: Verdict) -> str:
    if v.ci_low is None or v.ci_high is None:
        return "-"
    return f"{v.ci_low:+.1%}..{v.ci_high:+.1%}"


def render_verdicts(verdicts: Sequence[Verdict]) -> list[str]:
    """A table of verdicts, one line per metric, what explains them under it; each column as
    wide as its widest cell.

    ``interval`` bounds the change (see perfgate.gate.judge); ``runs`` is current runs over
    approved runs. Non-passing verdicts are explained below the table, each clause of their
    messages said once: first the clauses several metrics share, on one line that names them,
    then each metric's own on its line; what the table shows already (the change, its
    interval, the tolerance, the runs) not at all. Throughput verdicts that moved get their
    attribution (``why:``), whose cause (the runs' cycle, phases and accept length) is said
    once where two share it.
    """
    # The metric column fits the longest name (serving_output_tok_s), 16 at least.
    width = max([16, *(len(v.metric) + 2 for v in verdicts)])
    rows = [(v.metric, _cells(v), v.status.value) for v in verdicts]
    widths = [
        max([least, *(len(cells[i]) + 1 for _, cells, _ in rows)])
        for i, (_, _, least, _) in enumerate(_COLUMNS)
    ]
    headers = [header for header, _, _, _ in _COLUMNS]
    lines = [_row(width, "metric", headers, widths, "verdict")]
    lines += [_row(width, metric, cells, widths, status) for metric, cells, status in rows]
    lines += _explanations(verdicts)
    lines += _whys(verdicts)
    return lines


# The table's columns between the metric and the verdict: header, alignment, least width, and
# the gap before. Each is as wide as its widest cell and a space, so that no cell runs into the
# one before it (verify +11300.0%, a server slowed a hundredfold).
_COLUMNS = (
    ("baseline", ">", 11, ""),
    ("current", ">", 11, ""),
    ("change", ">", 8, ""),
    ("interval", "<", 15, "  "),
    ("tol", ">", 5, ""),
    ("runs", ">", 6, ""),
)


def _cells(v: Verdict) -> list[str]:
    """A verdict's cells in the table's columns (_COLUMNS), "-" where a figure is unknown."""
    return [
        _number(v.baseline, ".3f"),
        _number(v.current, ".3f"),
        _number(v.change, "+.1%"),
        _interval(v),
        "-" if v.tolerance is None else _percent(v.tolerance),
        f"{v.runs}/{v.baseline_runs}" if v.runs is not None else "-",
    ]


def _row(width: int, metric: str, cells: Sequence[str], widths: Sequence[int], verdict: str) -> str:
    columns = zip(_COLUMNS, cells, widths, strict=True)
    middle = "".join(f"{gap}{cell:{align}{w}}" for (_, align, _, gap), cell, w in columns)
    return f"  {metric:<{width}}{middle}  {verdict}"


def _percent(fraction: float) -> str:
    """A tolerance as the table shows it: 3%, or 4.5% where the tenth counts."""
    return f"{fraction:.0%}" if round(fraction * 100, 1).is_integer() else f"{fraction:.1%}"


# Where a clause of a verdict's message splits in two: the spread between runs (often the same
# for every metric) and the spread within them (each metric's own).
_WITHIN_RUNS = ", within runs "
EXPLANATION_WIDTH = 100


def _explanations(verdicts: Sequence[Verdict]) -> list[str]:
    """The non-passing verdicts' messages under the table, each clause said once."""
    explained = [
        (v, clauses)
        for v in verdicts
        if v.status not in (Status.PASS, Status.IMPROVEMENT) and (clauses := _untold(v))
    ]
    shared: list[str] = []
    if len(explained) > 1:
        first, *others = [clauses for _, clauses in explained]
        shared = [c for c in first if all(c in clauses for clauses in others)]
    lines = []
    if shared:
        names = [v.metric for v, _ in explained]
        which = f"all {len(names)} metrics" if len(names) == len(verdicts) else ", ".join(names)
        lines += wrap(f"{which}: {'; '.join(shared)}")
    owned = [(v.metric, own) for v, clauses in explained if (own := _unshared(clauses, shared))]
    return lines + _own_lines(owned)


def _unshared(clauses: Sequence[str], shared: Sequence[str]) -> list[str]:
    return [c for c in clauses if c not in shared]


def _own_lines(owned: Sequence[tuple[str, list[str]]]) -> list[str]:
    """Each metric's own clauses, a line per metric; one line for all where each has one
    clause and they begin alike ("spread within runs: output_tok_s 8.1%, verify_ms 4.0%")."""
    if len(owned) > 1 and all(len(clauses) == 1 for _, clauses in owned):
        words = [clauses[0].split(" ") for _, clauses in owned]
        common = _common_start(words)
        if len(common) >= 2:
            parts = [
                f"{metric} {' '.join(w[len(common) :])}"
                for (metric, _), w in zip(owned, words, strict=True)
            ]
            return wrap(f"{' '.join(common)}: {', '.join(parts)}")
    return [line for metric, clauses in owned for line in wrap(f"{metric}: {'; '.join(clauses)}")]


def _common_start(words: Sequence[list[str]]) -> list[str]:
    """The words every list begins with, leaving each at least one of its own."""
    common: list[str] = []
    for column in zip(*words, strict=False):
        if len(set(column)) > 1:
            break
        common.append(column[0])
    return common[: min(len(w) for w in words) - 1]


def _untold(v: Verdict) -> list[str]:
    """The clauses of a verdict's message that its row of the table does not show."""
    told = set()
    if None not in (v.change, v.ci_low, v.ci_high, v.tolerance):
        told.add(
            f"{v.change:+.1%} (interval {v.ci_low:+.1%} to {v.ci_high:+.1%}) "
            f"against a tolerance of {v.tolerance:.1%}"
        )
    if v.runs is not None:
        told.add(f"{v.runs} run{'s' if v.runs > 1 else ''} against {v.baseline_runs} approved")
    clauses = []
    for clause in v.message.split("; "):
        head, within, rest = clause.partition(_WITHIN_RUNS)
        clauses += [head, f"spread within runs {rest}"] if within else [clause]
    return [c for c in clauses if c and c not in told]


def wrap(text: str, indent: str = "  ") -> list[str]:
    """`text` as lines of at most EXPLANATION_WIDTH columns, the later ones indented further."""
    return textwrap.wrap(
        text,
        EXPLANATION_WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _whys(verdicts: Sequence[Verdict]) -> list[str]:
    """A `why:` line per throughput verdict that moved; where two share their cause (the
    cycle, its phases and the accept length of the same runs), the second names the first's
    rather than saying it again."""
    lines: list[str] = []
    told: dict[str, str] = {}  # a cause, and the metric whose line said it
    for v in verdicts:
        if not v.says_why:
            continue
        why = v.attribution
        if why is None:
            lines += wrap(
                f"why: {v.metric}: unknown, no phase timings on one side (see `baseline show`)"
            )
        elif why.cause in told:
            lines += wrap(f"why: {why.head} cycle and accept length as for {told[why.cause]}")
        else:
            told[why.cause] = v.metric
            lines += wrap(f"why: {why.summary}")
    return lines


def render_record(record: RunRecord, plain_note: str | None = None) -> list[str]:
    """A run's headline, verdict table, equivalence line, and where its plain figures came
    from when the scenario allows reusing them (`plain_note`: why they were measured)."""
    m = record.measurement
    head = f"{m.scenario} on {m.profile}: {_run_name(record)} {record.status.value.upper()}"
    earlier = next((v.with_runs for v in record.verdicts if v.with_runs), ())
    if earlier:
        head += f" (judged with run {', '.join(f'#{i}' for i in earlier)})"
    lines = [head]
    if record.verdicts:
        lines += wrap(record.judged_against) if record.judged_against else []
        lines += render_verdicts(record.verdicts)
        cost = runs_phrase(record.verdicts)
        lines += wrap(f"runs: {cost}") if cost else []
    else:
        lines += wrap(record.judged_against or "no verdicts")
    lines.append(f"  equivalence: {m.equivalence_line()}")
    if m.plain.reused_from is not None:
        lines.append(
            f"  plain twin: figures reused from run #{m.plain.reused_from} (same plain "
            "fingerprint, within plain_max_age_h); --refresh-plain measures it again"
        )
    elif plain_note is not None:
        lines.append(f"  plain twin: measured ({plain_note})")
    return lines


def _run_name(record: RunRecord) -> str:
    return f"run #{record.id}" if record.id is not None else "run (not recorded)"


def render_terminal_summary(session: FinishedSession, error: PerfgateError | None) -> list[str]:
    """Everything the session has to say at its end.

    A scenario measured more than once (its first verdicts were inconclusive) shows one line
    per earlier run, then its last run in full.
    """
    lines: list[str] = []
    final = {id(r) for r in session.final_records()}
    for record in session.records:
        if id(record) in final:
            name = record.measurement.scenario
            lines += render_record(record, session.plain_note(name))
            if session.judged_locally(name):
                lines += _local_inconclusive(record)
        else:
            m = record.measurement
            lines.append(
                f"{m.scenario} on {m.profile}: {_run_name(record)} {record.status.value}, "
                "measured again"
            )
    for name, failure in session.errors().items():
        lines.append(f"{name}: not measured: {failure}")
    lines += [f"perfgate: internal error: {bug}" for bug in session.internal_errors]
    if error is not None:
        lines.append(f"perfgate: error: {error}")
    if session.report_written:
        lines.append(f"report: {session.report_path}")
    if any(record.id is not None for record in session.records):
        lines.append(f"history: {session.history_url}")
    lines.append(f"perfgate exit code: {int(session.exit_code)}")
    return lines


def _local_inconclusive(record: RunRecord) -> list[str]:
    if record.status is not Status.INCONCLUSIVE:
        return []
    return wrap(
        "inconclusive against this machine's own runs, which cannot yet bound its noise: "
        "that does not fail a local run (exit 0); each run adds to the reference, and CI "
        "judges only against a reviewed baseline"
    )


def verdicts_document(
    records: Sequence[RunRecord],
    verdicts: Sequence[Verdict],
    status: Status,
    exit_code: int,
    baseline_path: str | None,
) -> dict[str, Any]:
    """The JSON document of `perfgate gate --json`: the runs judged and every verdict."""
    m = records[-1].measurement
    return {
        "scenario": m.scenario,
        "profile": m.profile,
        "runs": [r.id for r in records],
        "baseline": baseline_path,
        "status": status.value,
        "exit_code": exit_code,
        "verdicts": [v.to_dict() for v in verdicts],
        "equivalence": [
            {
                "run": r.id,
                "ok": r.measurement.equivalence.ok,
                "gated": r.measurement.equivalence_gated,
                "summary": r.measurement.equivalence.summary(),
            }
            for r in records
        ],
    }
