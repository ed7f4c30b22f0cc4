"""The one history query the plain-twin reuse needs: the latest reusable plain result."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfgate.results import ModeResult
from perfgate.store.models import RunRow
from perfgate.store.queries import load_run
from perfgate.store.records import as_utc

SCAN_LIMIT = 500  # runs looked at, newest first; older ones are past any sensible age anyway


def latest_plain_result(
    session: Session, reuse_key: str, measured_after: datetime
) -> tuple[int, ModeResult] | None:
    """The newest plain twin measured with `reuse_key` since `measured_after`: its run id and
    result, or None. A plain result that was itself reused is never reused again: its age is
    its original's."""
    query = select(RunRow.id, RunRow.servers, RunRow.started_at).order_by(RunRow.id.desc())
    for run_id, servers, started_at in session.execute(query.limit(SCAN_LIMIT)):
        if as_utc(started_at) < as_utc(measured_after):
            continue
        plain = (servers or {}).get("plain") or {}
        if plain.get("reuse_key") == reuse_key and plain.get("reused_from") is None:
            return run_id, load_run(session, run_id).measurement.plain
    return None
