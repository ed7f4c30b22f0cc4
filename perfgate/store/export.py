"""A recorded run as plain JSON-ready data: everything the history holds about it."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from perfgate.results import ModeResult, RunRecord


def run_to_dict(record: RunRecord) -> dict[str, Any]:
    """Every field of a run: context, fingerprint, both servers, equivalence, verdicts."""
    m = record.measurement
    return {
        "id": record.id,
        "scenario": m.scenario,
        "profile": m.profile,
        "engine": m.engine,
        "status": record.status.value,
        "started_at": _time(m.started_at),
        "finished_at": _time(m.finished_at),
        "context": dataclasses.asdict(record.context),
        "fingerprint": dict(m.fingerprint),
        "config": dict(m.config),
        "samples": {name: list(values) for name, values in m.samples().items()},
        "plain": _mode(m.plain),
        "spec": _mode(m.spec),
        "equivalence": {
            "ok": m.equivalence.ok,
            "summary": m.equivalence.summary(),
            "prompts": [dataclasses.asdict(p) for p in m.equivalence.prompts],
        },
        "verdicts": [{**dataclasses.asdict(v), "status": v.status.value} for v in record.verdicts],
    }


def _mode(result: ModeResult) -> dict[str, Any]:
    return {
        "command": result.command,
        "samples": {name: list(values) for name, values in result.samples.items()},
        "phases": [dataclasses.asdict(p) for p in result.phases],
        "outputs": [list(ids) for ids in result.outputs],
        "server_info": dict(result.server_info),
        "log_path": result.log_path,
    }


def _time(moment: datetime) -> str:
    return moment.isoformat()
