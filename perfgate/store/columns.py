"""The report's question of the history: every selected run as columns, not as records.

A report over 10,000 runs cannot load 10,000 RunRecords (outputs, commands, server info); it
needs a few scalars per run, one value per metric, the phase means and the verdicts.
`history_columns` reads those with Core queries, one per table, and hands them back keyed by
run id: plain values, no row object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import ScalarSelect, Select, Text, case, cast, func, select
from sqlalchemy.orm import Session

from perfgate.results import RunRecord
from perfgate.store.bisect_steps import BisectStep, bisect_steps
from perfgate.store.models import PhaseRow, RunRow, SampleRow, VerdictRow
from perfgate.store.queries import RunFilter
from perfgate.store.records import as_utc
from perfgate.store.verdicts import stored_values, verdict_columns

__all__ = [
    "HistoryColumns",
    "RunFacts",
    "VerdictFacts",
    "central_value",
    "columns_from_records",
    "history_columns",
]


@dataclass(frozen=True)
class RunFacts:
    """One run's own columns: where and when it ran, how it was judged, what it ran on."""

    id: int
    scenario: str
    profile: str
    engine: str
    status: str
    started_at: datetime
    commit: str | None
    branch: str | None
    pr: str | None
    ci_url: str | None
    dirty: bool
    equivalent: bool
    fingerprint: dict[str, Any]  # shared between runs with the same one: do not change it
    config: dict[str, Any]  # likewise
    plain_reused_from: int | None  # the run whose plain figures this run reused, if any
    finished_at: datetime | None = None  # with started_at: the runner time the run took


@dataclass(frozen=True)
class VerdictFacts:
    """One metric's verdict as recorded: the band it was judged against, and the outcome."""

    status: str
    baseline: float | None
    current: float | None
    change: float | None
    tolerance: float | None


# The fields of a recorded verdict the report reads, as the history stores them.
_FACTS = tuple(f.name for f in fields(VerdictFacts))


@dataclass
class HistoryColumns:
    """The selected runs, oldest first, and what was measured in each, by run id.

    `values[(mode, metric)][run_id]` is the metric's central value in that run: the mean of
    its repeats without the lowest and the highest when there are 3 or more (so the median
    itself for 3 or 4 repeats, and, like it, deaf to one wild repeat), else their mean.
    `phase_ms[(mode, phase)][run_id]` is the phase's mean ms per cycle, averaged over the
    repeats (means, so that the named phases and `other` add up to the cycle).
    `verdicts[metric][run_id]` is the metric's recorded verdict. `bisect_steps` are the
    bisects' judged commits under the selection's name and profile, oldest first.
    """

    runs: list[RunFacts]
    values: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    phase_ms: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    verdicts: dict[str, dict[int, VerdictFacts]] = field(default_factory=dict)
    bisect_steps: list[BisectStep] = field(default_factory=list)


def history_columns(session: Session, where: RunFilter | None = None) -> HistoryColumns:
    """Read the selected runs' scalars, central values, phase means and verdicts.

    Aggregates in the database, one query per table: 10,000 runs of 20 metrics of 5 repeats
    are a million sample rows, and only one value per run and metric leaves the database.
    """
    selected = (where or RunFilter()).apply(select(RunRow.id))
    chosen = selected.scalar_subquery()
    connection = session.connection()
    parsed: dict[str, dict[str, Any]] = {}
    rows = connection.execute(_run_columns(chosen)).all()
    columns = HistoryColumns([_facts(row, parsed) for row in rows])
    _group(columns.values, connection.execute(_central_values(chosen)).all())
    phases = select(PhaseRow.run_id, PhaseRow.mode, PhaseRow.phase, func.avg(PhaseRow.mean_ms))
    phases = phases.where(PhaseRow.run_id.in_(chosen))
    phases = phases.group_by(PhaseRow.run_id, PhaseRow.mode, PhaseRow.phase)
    _group(columns.phase_ms, connection.execute(phases).all())
    verdicts = select(VerdictRow.run_id, *verdict_columns(("metric", *_FACTS)))
    for run_id, metric, *stored in connection.execute(
        verdicts.where(VerdictRow.run_id.in_(chosen))
    ):
        facts = VerdictFacts(**dict(zip(_FACTS, stored, strict=True)))
        columns.verdicts.setdefault(metric, {})[run_id] = facts
    columns.bisect_steps = bisect_steps(session, where)
    return columns


def _central_values(chosen: ScalarSelect[Any]) -> Select[*tuple[Any, ...]]:
    value, count = SampleRow.value, func.count()
    trimmed = (func.sum(value) - func.min(value) - func.max(value)) / (count - 2)
    central = case((count >= 3, trimmed), else_=func.avg(value))
    # Grouped in the covering index's order (run, metric, mode): no sort in the database.
    return (
        select(SampleRow.run_id, SampleRow.mode, SampleRow.metric, central)
        .where(SampleRow.run_id.in_(chosen))
        .group_by(SampleRow.run_id, SampleRow.metric, SampleRow.mode)
    )


def _run_columns(chosen: ScalarSelect[Any]) -> Select[*tuple[Any, ...]]:
    # The plain twin's origin sits inside the `servers` JSON; read only that path of it.
    reused = RunRow.servers[("plain", "reused_from")].as_string()
    query = (
        select(
            RunRow.id,
            RunRow.scenario,
            RunRow.profile,
            RunRow.engine,
            RunRow.status,
            RunRow.started_at,
            RunRow.commit,
            RunRow.branch,
            RunRow.pr,
            RunRow.ci_url,
            RunRow.dirty,
            RunRow.equivalent,
            # As text: runs of a scenario mostly share one fingerprint and one config, so each
            # distinct text is parsed once (see _facts), not once per run.
            cast(RunRow.fingerprint, Text),
            cast(RunRow.config, Text),
            reused,
            RunRow.finished_at,
        )
        .where(RunRow.id.in_(chosen))
        .order_by(RunRow.started_at, RunRow.id)
    )
    return query


def _facts(row: Any, parsed: dict[str, dict[str, Any]]) -> RunFacts:
    """A run's facts from its row; `parsed` remembers the JSON texts already parsed."""
    (run_id, scenario, profile, engine, status, started_at, commit, branch, pr, ci_url) = row[:10]
    dirty, equivalent, fingerprint, config, reused, finished_at = row[10:]
    for text in (fingerprint, config):
        if text not in parsed:
            parsed[text] = json.loads(text) if text else {}
    return RunFacts(
        run_id, scenario, profile, engine, status, as_utc(started_at), commit, branch, pr,
        ci_url, bool(dirty), bool(equivalent), parsed[fingerprint], parsed[config],
        _as_int(reused), as_utc(finished_at) if finished_at is not None else None,
    )  # fmt: skip


def _as_int(value: object) -> int | None:
    if value is None or value == "null":
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def _group(into: dict[tuple[str, str], dict[int, float]], rows: Iterable[Any]) -> None:
    for run_id, mode, name, value in rows:
        into.setdefault((mode, name), {})[run_id] = value


def central_value(values: Sequence[float]) -> float:
    """A run's value of a metric from its repeats, as `history_columns` computes it in SQL.

    The mean without the lowest and the highest repeat when there are 3 or more (the median
    itself for 3 or 4), else the plain mean.

    >>> central_value([10.0, 11.0, 30.0]), central_value([1.0, 2.0, 3.0, 10.0])
    (11.0, 2.5)
    """
    if len(values) >= 3:
        return (sum(values) - min(values) - max(values)) / (len(values) - 2)
    return sum(values) / len(values)


def columns_from_records(records: Sequence[RunRecord]) -> HistoryColumns:
    """The columns `history_columns` would read, from runs in memory (oldest first)."""
    ordered = sorted(records, key=lambda r: (r.measurement.started_at, r.id or 0))
    columns = HistoryColumns([_facts_of(i, record) for i, record in enumerate(ordered)])
    for facts, record in zip(columns.runs, ordered, strict=True):
        m = record.measurement
        samples = [("plain", m.plain.samples), ("spec", m.spec.samples)]
        for mode, by_metric in [*samples, ("spec", m.derived_samples())]:
            for metric, values in by_metric.items():
                if values:
                    columns.values.setdefault((mode, metric), {})[facts.id] = central_value(values)
        phases: dict[tuple[str, str], list[float]] = {}
        for summary in (*m.plain.phases, *m.spec.phases):
            phases.setdefault((summary.mode, summary.phase), []).append(summary.mean_ms)
        for key, means in phases.items():
            columns.phase_ms.setdefault(key, {})[facts.id] = sum(means) / len(means)
        for v in record.verdicts:
            stored = stored_values(v, _FACTS)
            columns.verdicts.setdefault(v.metric, {})[facts.id] = VerdictFacts(**stored)
    return columns


def _facts_of(index: int, record: RunRecord) -> RunFacts:
    m, context = record.measurement, record.context
    return RunFacts(
        # A run not yet recorded has no id: a negative one keeps it apart from recorded runs.
        id=record.id if record.id is not None else -(index + 1),
        scenario=m.scenario,
        profile=m.profile,
        engine=m.engine,
        status=record.status.value,
        started_at=m.started_at,
        commit=context.commit,
        branch=context.branch,
        pr=context.pr,
        ci_url=context.ci_url,
        dirty=context.dirty,
        equivalent=m.equivalence.ok,
        fingerprint=dict(m.fingerprint),
        config=dict(m.config),
        plain_reused_from=getattr(m.plain, "reused_from", None),
        finished_at=m.finished_at,
    )
