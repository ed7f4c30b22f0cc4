"""What a sweep varies, as configured: ``[sweeps.NAME]`` tables validated into SweepSpecs. Pure.

perfgate.sweep.grid lays a SweepSpec out into the points a sweep measures.

::

    [sweeps.steps]
    scenario = "embedded-default"
    steps = "1-10"            # or a list: [1, 2, 3]
    topk = [1]                # default [1]
    draft_tokens = [4, 8]     # trees only (topk > 1)
    repeats = 3               # default: the scenario's
    early_stop = true         # default true
    [sweeps.steps.env]
    NCCL_PROTO = ["LL", "Simple"]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.env_names import refuse_bad_env_names
from perfgate.errors import ConfigError
from perfgate.spec.values import boolean, positive_int


@dataclass(frozen=True)
class SweepSpec:
    """A sweep as configured: the scenario it varies and the values it tries."""

    name: str
    scenario: str
    steps: tuple[int, ...]
    topk: tuple[int, ...] = (1,)
    draft_tokens: tuple[int, ...] = ()  # for trees (topk > 1)
    env: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    repeats: int | None = None  # None: the scenario's
    early_stop: bool = True


_KEYS = {"scenario", "steps", "topk", "draft_tokens", "repeats", "early_stop", "env"}


def parse_sweep_table(path: Path, name: str, raw: Any, scenarios: Sequence[str]) -> SweepSpec:
    """Validate one ``[sweeps.NAME]`` table of the config file."""
    where = f"sweeps.{name}"
    if not isinstance(raw, dict):
        raise ConfigError("must be a table", file=path, field=where, fix=f"write [{where}]")
    if name in scenarios:
        raise ConfigError(
            "has a scenario's name: the sweep's runs are recorded under its name, and would "
            "mix with the gate's runs of that scenario",
            file=path,
            field=where,
            fix="name the sweep otherwise",
        )
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}",
            file=path,
            field=where,
            fix=f"use {', '.join(sorted(_KEYS))}",
        )
    scenario = raw.get("scenario")
    if not isinstance(scenario, str) or scenario not in scenarios:
        raise ConfigError(
            f"names no scenario of this file ({scenario!r})",
            file=path,
            field=f"{where}.scenario",
            fix=f"choose one of {', '.join(sorted(scenarios))}",
        )
    return SweepSpec(
        name=name,
        scenario=scenario,
        steps=_ints(path, f"{where}.steps", raw.get("steps")),
        topk=_ints(path, f"{where}.topk", raw.get("topk", [1])),
        draft_tokens=_ints(path, f"{where}.draft_tokens", raw.get("draft_tokens", []), empty=True),
        env=_env_table(path, f"{where}.env", raw.get("env", {})),
        repeats=_optional_int(path, f"{where}.repeats", raw.get("repeats")),
        early_stop=boolean(path, f"{where}.early_stop", raw.get("early_stop", True)),
    )


def _ints(path: Path, where: str, value: Any, *, empty: bool = False) -> tuple[int, ...]:
    if isinstance(value, str):
        return parse_int_list(value, where, file=path)
    ok = isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    )
    if not ok or (not value and not empty):
        raise ConfigError(
            f'must be a list of ints >= 1 or a range like "1-10", not {value!r}',
            file=path,
            field=where,
            fix='write e.g. [1, 2, 3] or "1-10"',
        )
    return tuple(dict.fromkeys(value))


def _env_table(path: Path, where: str, value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        raise ConfigError("must be a table", file=path, field=where, fix=f"write [{where}]")
    matrix = {}
    for name, values in value.items():
        if isinstance(values, str):
            values = [values]
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) for v in values)
        ):
            raise ConfigError(
                "must be a non-empty list of strings",
                file=path,
                field=f"{where}.{name}",
                fix='write ["LL", "Simple"]',
            )
        matrix[name] = tuple(values)
    refuse_bad_env_names(matrix, file=path, field=where)
    return matrix


MAX_LIST = 1000  # values in one list: more is a typo, and the sweep's grid refuses it


def parse_int_list(text: str, where: str, *, file: Path | None = None) -> tuple[int, ...]:
    """Parse ``1-10``, ``1,2,4`` or ``1-3,8`` into distinct positive ints, in order."""
    values: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            first, dash, last = part.partition("-")
            low, high = int(first), int(last) if dash else int(first)
            if high - low + 1 + len(values) > MAX_LIST:  # before a range fills the memory
                raise ConfigError(
                    f"{text!r} holds more than {MAX_LIST} values",
                    file=file,
                    field=where,
                    fix="sweep fewer values at once, e.g. 1-10",
                )
            values += range(low, high + 1)
    except ValueError:
        raise ConfigError(
            f"{text!r} is not a list of numbers",
            file=file,
            field=where,
            fix="write e.g. 1-10 or 1,2,4",
        ) from None
    if not values or min(values) < 1:
        raise ConfigError(
            f"{text!r} holds no value, or one below 1",
            file=file,
            field=where,
            fix="use values >= 1",
        )
    return tuple(dict.fromkeys(values))


def _optional_int(path: Path, where: str, value: Any) -> int | None:
    return None if value is None else positive_int(path, where, value)
