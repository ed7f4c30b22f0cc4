"""Validators of configuration values: each returns the value or raises a ConfigError naming
the file and the field, with a fix. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError


def refuse_unknown(path: Path, where: str, raw: Mapping[str, Any], known: Set[str]) -> None:
    """Refuse a key of `raw` that is not in `known`."""
    for key in raw:
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r}",
                file=path,
                field=where or None,
                fix=f"use one of {', '.join(sorted(known))}",
            )


def table(path: Path, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError("must be a table", file=path, field=where, fix=f"write [{where}]")
    return value


def string(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"must be a non-empty string, not {value!r}", file=path, field=where, fix="quote it"
        )
    return value


def str_list(path: Path, where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            "must be a list of strings", file=path, field=where, fix='write ["a", "b"]'
        )
    return value


def str_tuple(path: Path, where: str, value: Any) -> tuple[str, ...]:
    return tuple(str_list(path, where, value))


def str_table(path: Path, where: str, value: Any) -> dict[str, str]:
    found = table(path, where, value)
    for key, item in found.items():
        if not isinstance(item, str):
            raise ConfigError(
                f"must be a string, not {item!r}", file=path, field=f"{where}.{key}", fix="quote it"
            )
    return dict(found)


# The largest integer a config field takes: a 32-bit signed int, what every engine's flags accept.
INT_MAX = 2**31 - 1


def positive_int(path: Path, where: str, value: Any, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT_MAX:
        raise ConfigError(
            f"must be an integer from {low} to {INT_MAX}, not {value!r}",
            file=path,
            field=where,
            fix="fix it",
        )
    return value


def count(path: Path, where: str, value: Any) -> int:
    """An integer >= 0."""
    return positive_int(path, where, value, allow_zero=True)


def fraction(path: Path, where: str, value: Any, *, open_: bool = False) -> float:
    """A number in [0, 1], or in (0, 1) when ``open_``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and (0 < value < 1 if open_ else 0 <= value <= 1)
    if not ok:
        bounds = "between 0 and 1, exclusive" if open_ else "from 0 to 1"
        raise ConfigError(
            f"must be a fraction {bounds}, not {value!r}",
            file=path,
            field=where,
            fix="write e.g. 0.2",
        )
    return float(value)


def boolean(path: Path, where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(
            f"must be true or false, not {value!r}", file=path, field=where, fix="write true"
        )
    return value


def positive_float(path: Path, where: str, value: Any) -> float:
    """A finite number > 0 (TOML's nan and inf are refused)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"must be a finite number > 0, not {value!r}", file=path, field=where, fix="fix it"
        )
    return float(value)
