"""Annotations for what failed the gate: shown on the run's page and the pull request's checks.

Errors: a regression, outputs that are not equivalent, a scenario that could not be measured.
Warnings: inconclusive, incomparable or error verdicts. Passing verdicts and improvements make
none. Annotations point at the scenario's baseline file when the run names one, so the reader
lands on what the run was judged against.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfgate.ci.pointer import SessionPointer
from perfgate.ci.workflow_commands import Annotation, limit_annotations
from perfgate.gate.verdict import Status, Verdict
from perfgate.results import RunRecord

WARNED = (Status.INCONCLUSIVE, Status.INCOMPARABLE, Status.ERROR)


def _verdict_message(v: Verdict) -> str:
    parts = [v.message]
    if v.attribution is not None:
        parts.append(f"why: {v.attribution.summary}")
    return "; ".join(p for p in parts if p)


def record_annotations(record: RunRecord, baseline_file: str | None = None) -> list[Annotation]:
    """The annotations one scenario's final run deserves."""
    m = record.measurement
    where = {"file": baseline_file} if baseline_file else {}
    found = []
    if not m.outputs_pass:
        found.append(
            Annotation(
                "error",
                f"speculative outputs differ from the plain ones: {m.equivalence.summary()}",
                f"perfgate: {m.scenario} outputs not equivalent",
                where,
            )
        )
    for v in record.verdicts:
        if v.status is Status.REGRESSION:
            level = "error"
        elif v.status in WARNED:
            level = "warning"
        else:
            continue
        title = f"perfgate: {m.scenario} {v.metric} {v.status.value}"
        found.append(Annotation(level, _verdict_message(v), title, where))
    return found


def session_annotations(
    pointer: SessionPointer | None,
    finals: Sequence[RunRecord],
    baseline_files: dict[str, str] | None = None,
) -> list[Annotation]:
    """Every annotation of the session, within GitHub's per-step limits."""
    if pointer is None:
        return [
            Annotation(
                "error",
                "the gate suites left no session: they did not run, or pytest failed; see the log",
                "perfgate: no verdict",
            )
        ]
    found = [
        Annotation(
            "error",
            error.message,
            f"perfgate: {error.scenario} not measured" if error.scenario else "perfgate",
        )
        for error in pointer.errors
    ]
    files = baseline_files or {}
    for record in finals:
        found += record_annotations(record, files.get(record.measurement.scenario))
    return limit_annotations(found)
