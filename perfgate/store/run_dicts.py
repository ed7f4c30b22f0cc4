"""A recorded run as plain JSON-ready data (everything the history holds about it), and back.

`run_from_dict(run_to_dict(record))` gives the record again: what `perfgate history export`
writes, and a run kept in `.perfgate/unrecorded/`, `perfgate history import` loads.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from perfgate.equivalence import EquivalenceReport, Outcome, PromptComparison, TokenCheck
from perfgate.gate.verdict import Status
from perfgate.results import Measurement, ModeResult, PhaseSummary, RunContext, RunRecord
from perfgate.store.verdicts import stored_values, verdict_from_values


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
            "near_tie_margin": m.equivalence.near_tie_margin,
            "max_near_tie_share": m.equivalence.max_near_tie_share,
            "prompts": [dataclasses.asdict(p) for p in m.equivalence.prompts],
        },
        "verdicts": [stored_values(v) for v in record.verdicts],
        "judged_against": record.judged_against,
    }


def run_from_dict(data: dict[str, Any]) -> RunRecord:
    """The run `run_to_dict` wrote. Raises KeyError, TypeError or ValueError for other data."""
    equivalence = data["equivalence"]
    measurement = Measurement(
        scenario=str(data["scenario"]),
        profile=str(data["profile"]),
        engine=str(data["engine"]),
        fingerprint={str(k): str(v) for k, v in data["fingerprint"].items()},
        plain=_mode_from_dict("plain", data["plain"]),
        spec=_mode_from_dict("spec", data["spec"]),
        equivalence=EquivalenceReport(
            tuple(_prompt(p) for p in equivalence["prompts"]),
            **{k: float(equivalence[k]) for k in _EQUIVALENCE_LIMITS if k in equivalence},
        ),
        started_at=_parse_time(data["started_at"]),
        finished_at=_parse_time(data["finished_at"]),
        config=dict(data["config"]),
    )
    return RunRecord(
        measurement=measurement,
        context=RunContext(**data["context"]),
        verdicts=tuple(verdict_from_values(v) for v in data["verdicts"]),
        status=Status(data["status"]),
        id=data.get("id"),
        judged_against=data.get("judged_against"),
    )


_EQUIVALENCE_LIMITS = ("near_tie_margin", "max_near_tie_share")


def _mode(result: ModeResult) -> dict[str, Any]:
    return {
        "command": result.command,
        "samples": {name: list(values) for name, values in result.samples.items()},
        "phases": [dataclasses.asdict(p) for p in result.phases],
        "outputs": [list(ids) for ids in result.outputs],
        "server_info": dict(result.server_info),
        "log_path": result.log_path,
        "engine_metrics": dict(result.engine_metrics),
        "reuse_key": result.reuse_key,
        "reused_from": result.reused_from,
    }


def _mode_from_dict(mode: str, data: dict[str, Any]) -> ModeResult:
    phases = tuple(PhaseSummary(**p) for p in data["phases"])
    if any(p.mode != mode for p in phases):
        raise ValueError(f"the {mode} server's phases name another server")
    return ModeResult(
        mode=mode,
        command=str(data["command"]),
        samples={str(k): tuple(float(x) for x in v) for k, v in data["samples"].items()},
        phases=phases,
        outputs=tuple(tuple(int(t) for t in ids) for ids in data["outputs"]),
        server_info=dict(data.get("server_info") or {}),
        log_path=str(data.get("log_path") or ""),
        engine_metrics={str(k): float(v) for k, v in (data.get("engine_metrics") or {}).items()},
        reuse_key=data.get("reuse_key"),
        reused_from=data.get("reused_from"),
    )


def _prompt(data: dict[str, Any]) -> PromptComparison:
    positions = tuple(
        TokenCheck(**{**check, "outcome": Outcome(check["outcome"])})
        for check in data.get("positions") or ()
    )
    return PromptComparison(**{**data, "outcome": Outcome(data["outcome"]), "positions": positions})


def _time(moment: datetime) -> str:
    return moment.isoformat()


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone")
    return moment
