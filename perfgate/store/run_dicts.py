"""A recorded run as plain JSON-ready data (everything the history holds about it), and back.

`run_from_dict(run_to_dict(record))` gives the record again: what `perfgate history export`
writes, and a run kept in `.perfgate/unrecorded/`, `perfgate history import` loads.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String

from perfgate.equivalence import EquivalenceReport, Outcome, PromptComparison, TokenCheck
from perfgate.gate.verdict import Status
from perfgate.results import Measurement, ModeResult, PhaseSummary, RunContext, RunRecord
from perfgate.store.models import RunRow, SampleRow
from perfgate.store.verdicts import stored_values, verdict_from_values


def _length(column: ColumnElement[Any]) -> int:
    kind = column.type
    assert isinstance(kind, String) and kind.length is not None
    return kind.length


# The longest names the history's columns hold.
SCENARIO_NAME_MAX = _length(RunRow.__table__.c.scenario)
METRIC_NAME_MAX = _length(SampleRow.__table__.c.metric)


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
    scenario = str(data["scenario"])
    if not 0 < len(scenario) <= SCENARIO_NAME_MAX:
        raise ValueError(
            f"the scenario name is {len(scenario)} characters long, not 1 to {SCENARIO_NAME_MAX}"
        )
    measurement = Measurement(
        scenario=scenario,
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
        samples={str(k): _samples(mode, str(k), v) for k, v in data["samples"].items()},
        phases=phases,
        outputs=tuple(tuple(int(t) for t in ids) for ids in data["outputs"]),
        server_info=dict(data.get("server_info") or {}),
        log_path=str(data.get("log_path") or ""),
        engine_metrics={str(k): float(v) for k, v in (data.get("engine_metrics") or {}).items()},
        reuse_key=data.get("reuse_key"),
        reused_from=data.get("reused_from"),
    )


def _samples(mode: str, metric: str, values: list[Any]) -> tuple[float, ...]:
    """A metric's samples, each a finite number >= 0 (what a measurement gives), at least one."""
    if not 0 < len(metric) <= METRIC_NAME_MAX:
        raise ValueError(f"the {mode} server's metric name {metric[:60]!r} is empty or too long")
    found = tuple(float(x) for x in values)
    if not found:
        raise ValueError(f"the {mode} server's {metric} has no sample")
    for repeat, value in enumerate(found):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"the {mode} server's {metric} sample {repeat} is {value}, not a finite number >= 0"
            )
    return found


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
