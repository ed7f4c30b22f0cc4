"""The HTML trend report: one self-contained, offline file rendered from the history.

Per scenario and runner profile: spec and plain tok/s, speedup, accept length and every
other metric over runs, with the band each run was judged against, its verdicts, change
points and environment changes marked; the per-phase breakdown of the decode cycle per run;
the latest run's verdicts (with their attribution), equivalence and fingerprint; sweeps;
bisects, and plans, predicted against measured.
The page draws its charts with uPlot, inlined from perfgate/report/static/ (no network).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session

from perfgate.files import write_text_atomically
from perfgate.report.chart_data import bisects_of, build_payload, group_runs, plans_of, sweeps_of
from perfgate.report.links import repository_url
from perfgate.report.page import Page, render_page
from perfgate.results import RunRecord
from perfgate.store import RunFilter, load_runs
from perfgate.store.columns import HistoryColumns, columns_from_records, history_columns

__all__ = ["render_history_report", "render_report", "write_history_report", "write_report"]


def render_report(
    runs: Sequence[RunRecord],
    generated_at: datetime | None = None,
    repository: str | None = None,
) -> str:
    """Render the report for runs held in memory (any order)."""
    columns = columns_from_records(runs)
    by_id = {facts.id: record for facts, record in zip(columns.runs, _ordered(runs), strict=True)}
    return _render(columns, lambda ids: [by_id[i] for i in ids], repository, generated_at)


def render_history_report(
    session: Session,
    where: RunFilter | None = None,
    repository: str | None = None,
    generated_at: datetime | None = None,
) -> str:
    """Render the report for the history's runs (those `where` selects).

    The charts come from column queries; only each group's newest run is loaded whole.
    """
    columns = history_columns(session, where)
    selection = where.describe() if where is not None else ""
    return _render(
        columns, lambda ids: load_runs(session, ids), repository, generated_at, selection
    )


def write_report(path: Path, runs: Sequence[RunRecord]) -> Path:
    """Render the report for runs held in memory and write it atomically; return its path."""
    return write_text_atomically(path, render_report(runs))


def write_history_report(
    path: Path,
    session: Session,
    where: RunFilter | None = None,
    repository: str | None = None,
) -> Path:
    """Render the report from the history and write it atomically; return its path."""
    return write_text_atomically(path, render_history_report(session, where, repository))


def _render(
    columns: HistoryColumns,
    load: Callable[[list[int]], Sequence[RunRecord]],
    repository: str | None,
    generated_at: datetime | None,
    selection: str = "",
) -> str:
    groups = group_runs(columns)
    repository = repository_url([run.ci_url for run in columns.runs], repository)
    newest_ids = [group.runs[-1].id for group in groups]
    latest = {(r.measurement.scenario, r.measurement.profile): r for r in load(newest_ids)}
    sweeps = sweeps_of(columns)
    page = Page(
        groups=groups,
        latest=latest,
        payload=build_payload(columns, groups, sweeps, repository),
        sweeps=sweeps,
        bisects=bisects_of(columns),
        plans=plans_of(columns),
        repository=repository,
        generated_at=generated_at or datetime.now(UTC),
        selection=selection,
    )
    return render_page(page)


def _ordered(runs: Sequence[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: (r.measurement.started_at, r.id or 0))
