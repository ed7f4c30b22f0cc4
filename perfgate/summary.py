"""Verdicts as text: the table printed at the end of a run."""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.errors import PerfgateError
from perfgate.gate.verdict import Verdict
from perfgate.results import RunRecord
from perfgate.session import GateSession


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render_verdicts(verdicts: Sequence[Verdict]) -> list[str]:
    """A fixed-width table of verdicts, one metric per line."""
    lines = [f"  {'metric':<16}{'baseline':>12}{'current':>12}{'change':>9}{'tol':>6}  verdict"]
    for v in verdicts:
        tolerance = "-" if v.tolerance is None else f"{v.tolerance:.0%}"
        lines.append(
            f"  {v.metric:<16}{_number(v.baseline, '.3f'):>12}{_number(v.current, '.3f'):>12}"
            f"{_number(v.change, '+.1%'):>9}{tolerance:>6}  {v.status.value}"
        )
        if v.status.value not in ("pass", "improvement"):
            lines.append(f"  {'':<16}{v.message}")
    return lines


def render_record(record: RunRecord, plain_note: str | None = None) -> list[str]:
    """A run's headline, verdict table, equivalence line, and where its plain figures came
    from when the scenario allows reusing them (`plain_note`: why they were measured)."""
    m = record.measurement
    lines = [f"{m.scenario} on {m.profile}: run #{record.id} {record.status.value.upper()}"]
    lines += render_verdicts(record.verdicts) if record.verdicts else ["  no verdicts (not gated)"]
    lines.append(f"  equivalence: {m.equivalence.summary()}")
    if m.plain.reused_from is not None:
        lines.append(
            f"  plain twin: figures reused from run #{m.plain.reused_from} (same plain "
            "fingerprint, within plain_max_age_h); --refresh-plain measures it again"
        )
    elif plain_note is not None:
        lines.append(f"  plain twin: measured ({plain_note})")
    return lines


def render_terminal_summary(session: GateSession, error: PerfgateError | None) -> list[str]:
    """Everything the session has to say at its end."""
    lines: list[str] = []
    for record in session.records:
        run = session.runs.get(record.measurement.scenario)
        lines += render_record(record, run.plain_note if run else None)
    for name, run in session.runs.items():
        if run.error is not None:
            lines.append(f"{name}: not measured: {run.error}")
    if error is not None:
        lines.append(f"perfgate: error: {error}")
    if session.records:
        if session.report_path is not None:
            lines.append(f"report: {session.report_path}")
        lines.append(f"history: {session.history_url}")
    lines.append(f"perfgate exit code: {int(session.exit_code)}")
    return lines
