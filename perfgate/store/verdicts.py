"""Verdicts in and out of rows and files, from one definition.

`VERDICT_FIELDS` says where each field of a Verdict is kept: in a column of `verdicts`
(VerdictRow) or under a key of its JSON `detail`, and how its value is stored (the status as
its name, the attribution as a dict, the ids of the runs judged with it as a list). The history
(perfgate.store.records), its columns for the report (perfgate.store.columns) and the export
file (perfgate.store.run_dicts) all go through it, so a new Verdict field is added here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.gate.attribution import Attribution, PhaseShift
from perfgate.gate.verdict import Status, Verdict
from perfgate.store.models import VerdictRow


def _same(value: Any) -> Any:
    return value


def _status_name(status: Status) -> str:
    return status.value


def _attribution_dict(attribution: Attribution | None) -> dict[str, Any] | None:
    return attribution.to_dict() if attribution else None


def _run_ids(ids: Sequence[int]) -> list[int]:
    return list(ids)


def _run_id_tuple(ids: Sequence[Any] | None) -> tuple[int, ...]:
    return tuple(int(i) for i in ids or ())


def attribution_from_dict(raw: dict[str, Any] | None) -> Attribution | None:
    """An attribution from its dict (`Attribution.to_dict`, or `dataclasses.asdict`)."""
    if not raw:
        return None

    def shift(item: dict[str, Any]) -> PhaseShift:
        return PhaseShift(item["phase"], item["baseline_ms"], item["current_ms"], item["share"])

    accept, tok_s = raw.get("accept_length"), raw.get("tok_s_change")
    return Attribution(
        metric=raw["metric"],
        change=raw["change"],
        cycle=shift(raw["cycle"]),
        phases=tuple(shift(p) for p in raw["phases"]),
        accept_length=(accept[0], accept[1]) if accept else None,
        tok_s_change=(tok_s[0], tok_s[1]) if tok_s else None,
        summary=raw["summary"],
    )


@dataclass(frozen=True)
class VerdictField:
    """Where one Verdict field is kept, and how its value is stored and read back."""

    attribute: str
    column: str | None  # the VerdictRow column; None: a key of VerdictRow.detail
    store: Callable[[Any], Any] = _same  # to a stored, JSON-ready value
    load: Callable[[Any], Any] = _same  # back from it


# In the order of Verdict's fields.
VERDICT_FIELDS: tuple[VerdictField, ...] = (
    VerdictField("metric", "metric"),
    VerdictField("status", "status", _status_name, Status),
    VerdictField("message", "message"),
    VerdictField("baseline", "baseline"),
    VerdictField("current", "current"),
    VerdictField("change", "change"),
    VerdictField("ci_low", "ci_low"),
    VerdictField("ci_high", "ci_high"),
    VerdictField("tolerance", "tolerance"),
    VerdictField("runs", None),
    VerdictField("baseline_runs", None),
    VerdictField("p_value", None),
    VerdictField("alpha", None),
    VerdictField("attribution", None, _attribution_dict, attribution_from_dict),
    VerdictField("with_runs", None, _run_ids, _run_id_tuple),
    VerdictField("planned_runs", None),
    VerdictField("run_budget", None),
    VerdictField("runner_s", None),
)
_BY_ATTRIBUTE = {f.attribute: f for f in VERDICT_FIELDS}
_REQUIRED = frozenset(
    f.name
    for f in dataclasses.fields(Verdict)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def stored_values(verdict: Verdict, attributes: Sequence[str] | None = None) -> dict[str, Any]:
    """The stored values of `verdict`'s fields (all of them, or `attributes`), by field."""
    chosen = [_BY_ATTRIBUTE[a] for a in attributes] if attributes else VERDICT_FIELDS
    return {f.attribute: f.store(getattr(verdict, f.attribute)) for f in chosen}


def verdict_from_values(values: Mapping[str, Any]) -> Verdict:
    """The verdict `stored_values` gave. Raises KeyError for a missing required field and
    TypeError for a key that is no field of a Verdict."""
    unknown = sorted(set(values) - set(_BY_ATTRIBUTE))
    if unknown:
        raise TypeError(f"a verdict has no field {unknown[0]!r}")
    fields = {}
    for f in VERDICT_FIELDS:
        raw = values[f.attribute] if f.attribute in _REQUIRED else values.get(f.attribute)
        fields[f.attribute] = f.load(raw)
    return Verdict(**fields)


def verdict_row(verdict: Verdict) -> VerdictRow:
    """The row that keeps `verdict` (its run to be set by the caller's relationship)."""
    values = stored_values(verdict)
    columns = {f.column: values[f.attribute] for f in VERDICT_FIELDS if f.column}
    detail = {f.attribute: values[f.attribute] for f in VERDICT_FIELDS if f.column is None}
    return VerdictRow(**columns, detail=detail)


def verdict_from_row(row: VerdictRow) -> Verdict:
    """The verdict a row keeps; detail keys an older row lacks read as unset."""
    detail = row.detail or {}
    values = {
        f.attribute: getattr(row, f.column) if f.column else detail.get(f.attribute)
        for f in VERDICT_FIELDS
    }
    return verdict_from_values(values)


def verdict_columns(attributes: Sequence[str]) -> list[Any]:
    """The VerdictRow columns of `attributes` (each kept in a column), for a select."""
    columns = [_BY_ATTRIBUTE[a].column for a in attributes]
    if None in columns:
        raise ValueError(f"not every one of {attributes} has a column of its own")
    return [getattr(VerdictRow, c) for c in columns if c]
