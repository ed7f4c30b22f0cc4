"""Runs in and out of rows: a RunRecord becomes one run row with its children, and back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from perfgate import metrics
from perfgate.equivalence import (
    DEFAULT_MAX_NEAR_TIE_SHARE,
    DEFAULT_NEAR_TIE_MARGIN,
    EquivalenceReport,
    Outcome,
    PromptComparison,
    TokenCheck,
)
from perfgate.gate.verdict import Status
from perfgate.results import Measurement, ModeResult, PhaseSummary, RunContext, RunRecord
from perfgate.store.database import WRITE_LOCK
from perfgate.store.models import OutputRow, PhaseRow, RunRow, SampleRow
from perfgate.store.verdicts import verdict_from_row, verdict_row


def record_run(session: Session, record: RunRecord) -> int:
    """Add a run with its samples, phases, outputs and verdicts; return its id.

    Commit the session's transaction to keep it; everything goes in or nothing does. On SQLite,
    record first in a transaction: that is what takes the write lock at its start.
    """
    take_write_lock(session)
    m = record.measurement
    row = RunRow(
        scenario=m.scenario,
        profile=m.profile,
        engine=m.engine,
        status=record.status.value,
        started_at=m.started_at,
        finished_at=m.finished_at,
        commit=record.context.commit,
        branch=record.context.branch,
        pr=record.context.pr,
        ci_url=record.context.ci_url,
        dirty=record.context.dirty,
        equivalent=m.equivalence.ok,
        fingerprint=dict(m.fingerprint),
        config=dict(m.config),
        servers={r.mode: _server_dict(r) for r in (m.plain, m.spec)},
        judged_against=record.judged_against,
    )
    for result in (m.plain, m.spec):
        row.samples += _sample_rows(result.mode, result.samples)
        row.phases += [PhaseRow(**vars(p)) for p in result.phases]
    row.samples += _sample_rows("spec", m.derived_samples())
    row.outputs = [
        OutputRow(
            prompt_index=c.index,
            spec_ids=list(m.spec.outputs[c.index]),
            plain_ids=list(m.plain.outputs[c.index]),
            matched=c.matched,
            prefix_len=c.prefix_len,
            outcome=c.outcome.value,
            margin=c.margin,
            margin_is_bound=c.margin_is_bound,
            forced=_forced_row(c),
        )
        for c in m.equivalence.prompts
    ]
    row.verdicts = [verdict_row(v) for v in record.verdicts]
    session.add(row)
    session.flush()
    return row.id


def take_write_lock(session: Session) -> None:
    """On SQLite, begin this session's transaction IMMEDIATE (once per transaction)."""
    if session.get_bind().dialect.name != "sqlite":
        return
    transaction = session.get_transaction()
    if transaction is not None and session.info.get(_WRITE_LOCKED) is transaction:
        return
    # Takes effect only if the transaction has not touched the database yet; else SQLAlchemy
    # warns: a read came first, so the lock comes late and a racing writer may win.
    session.connection(execution_options=WRITE_LOCK)
    session.info[_WRITE_LOCKED] = session.get_transaction()


_WRITE_LOCKED = "perfgate.write_locked_transaction"


def _server_dict(result: ModeResult) -> dict[str, object]:
    return {
        "command": result.command,
        "info": dict(result.server_info),
        "log": result.log_path,
        "engine_metrics": dict(result.engine_metrics),
        "reuse_key": result.reuse_key,
        "reused_from": result.reused_from,
    }


def _sample_rows(mode: str, samples: Mapping[str, Sequence[float]]) -> list[SampleRow]:
    return [
        SampleRow(mode=mode, metric=metric, repeat=i, value=value)
        for metric, values in samples.items()
        for i, value in enumerate(values)
    ]


def to_record(row: RunRow) -> RunRecord:
    servers = row.servers
    measurement = Measurement(
        scenario=row.scenario,
        profile=row.profile,
        engine=row.engine,
        fingerprint=row.fingerprint,
        plain=_mode_result(row, "plain", servers.get("plain", {})),
        spec=_mode_result(row, "spec", servers.get("spec", {})),
        equivalence=EquivalenceReport(
            tuple(_comparison(o) for o in sorted(row.outputs, key=lambda o: o.prompt_index)),
            float(row.config.get("near_tie_margin", DEFAULT_NEAR_TIE_MARGIN)),
            float(row.config.get("max_near_tie_share", DEFAULT_MAX_NEAR_TIE_SHARE)),
        ),
        started_at=as_utc(row.started_at),
        finished_at=as_utc(row.finished_at),
        config=row.config,
    )
    return RunRecord(
        measurement=measurement,
        context=RunContext(row.commit, row.branch, row.pr, row.ci_url, row.dirty),
        verdicts=tuple(verdict_from_row(v) for v in row.verdicts),
        status=Status(row.status),
        id=row.id,
        judged_against=row.judged_against,
    )


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC datetime: SQLite drops the zone, PostgreSQL converts it."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _mode_result(row: RunRow, mode: str, server: dict[str, object]) -> ModeResult:
    samples: dict[str, list[float]] = {}
    for s in sorted(row.samples, key=lambda s: (s.metric, s.repeat)):
        if s.mode == mode and s.metric not in metrics.DERIVED:
            samples.setdefault(s.metric, []).append(s.value)
    outputs = sorted(row.outputs, key=lambda o: o.prompt_index)
    return ModeResult(
        mode=mode,
        command=str(server.get("command", "")),
        samples={k: tuple(v) for k, v in samples.items()},
        phases=tuple(
            PhaseSummary(p.mode, p.phase, p.repeat, p.cycles, p.median_ms, p.mean_ms, p.p90_ms)
            for p in sorted(row.phases, key=lambda p: p.id)
            if p.mode == mode
        ),
        outputs=tuple(tuple(o.spec_ids if mode == "spec" else o.plain_ids) for o in outputs),
        server_info=dict(server.get("info", {})),  # type: ignore[call-overload]
        log_path=str(server.get("log", "")),
        engine_metrics=dict(server.get("engine_metrics") or {}),  # type: ignore[call-overload]
        reuse_key=server.get("reuse_key"),  # type: ignore[arg-type]
        reused_from=server.get("reused_from"),  # type: ignore[arg-type]
    )


def _comparison(row: OutputRow) -> PromptComparison:
    spec, plain, k = row.spec_ids, row.plain_ids, row.prefix_len
    # Rows recorded before outcomes were kept: a mismatch was a failure then.
    fallback = Outcome.MATCH if row.matched else Outcome.DIVERGED
    return PromptComparison(
        index=row.prompt_index,
        outcome=Outcome(row.outcome) if row.outcome else fallback,
        prefix_len=k,
        spec_len=len(spec),
        plain_len=len(plain),
        spec_token=None if row.matched or k >= len(spec) else spec[k],
        plain_token=None if row.matched or k >= len(plain) else plain[k],
        margin=row.margin,
        margin_is_bound=bool(row.margin_is_bound),
        **_forced_fields(row.forced),
    )


def _forced_row(c: PromptComparison) -> dict[str, Any] | None:
    if not c.forced:
        return None
    checks = [
        [p.position, p.spec_token, p.top_token, p.margin, p.outcome.value] for p in c.positions
    ]
    return {"compared": c.compared, "positions": checks}


def _forced_fields(forced: dict[str, Any] | None) -> dict[str, Any]:
    if not forced:
        return {}
    positions = tuple(
        TokenCheck(position, spec, top, margin, Outcome(outcome))
        for position, spec, top, margin, outcome in forced["positions"]
    )
    return {"forced": True, "compared": forced["compared"], "positions": positions}
