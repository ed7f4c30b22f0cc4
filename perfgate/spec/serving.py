"""`[scenarios.NAME.serving]`: the load a serving scenario sends, as configured. Pure.

perfgate.serving.load builds the requests of a load; this module only reads the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.spec.values import INT_MAX

# The recorded serving metrics of one load, by name (perfgate.metrics holds their directions).
SERVING_METRICS = ("serving_output_tok_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99")
# The same figures as SGLang's sglang.benchmark.serving measures them (the cross-check;
# perfgate.serving.sglang_bench maps each to its key in that tool's output).
CROSS_CHECK_METRICS = (
    "sglang_output_tok_s",
    "sglang_ttft_ms_p50",
    "sglang_ttft_ms_p99",
    "sglang_itl_ms_p50",
    "sglang_itl_ms_p99",
)
CROSS_CHECKS = ("auto", "sglang", "off")


@dataclass(frozen=True)
class ServingLoad:
    """`[scenarios.NAME.serving]`: requests sent at `request_rate` per second (Poisson
    arrivals; None, "inf" in the file: all at once), at most `max_concurrency` in flight."""

    num_prompts: int = 32
    request_rate: float | None = None
    max_concurrency: int | None = None
    input_len: int | None = None  # characters; None: the prompts as they are
    output_len: int | None = None  # tokens; None: the scenario's max_new_tokens
    range_ratio: float = 1.0
    seed: int = 0
    # SGLang's sglang.benchmark.serving against the same server, its figures recorded beside
    # perfgate's: "auto" when the interpreter has SGLang, "sglang" always, "off" never.
    cross_check: str = "auto"
    cross_check_python: str | None = None  # default: the scenario's python


_KEYS = {
    "num_prompts",
    "request_rate",
    "max_concurrency",
    "input_len",
    "output_len",
    "range_ratio",
    "seed",
    "cross_check",
    "cross_check_python",
}


def parse_serving(path: Path, where: str, raw: Any) -> ServingLoad:
    """Validate a `[scenarios.NAME.serving]` table."""
    if not isinstance(raw, Mapping):
        raise ConfigError("must be a table", file=path, field=where, fix=f"write [{where}]")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(
                f"unknown key {key!r}",
                file=path,
                field=where,
                fix=f"use one of {', '.join(sorted(_KEYS))}",
            )
    values: dict[str, Any] = {}
    for key in ("num_prompts", "max_concurrency", "input_len", "output_len"):
        if key in raw:
            values[key] = _int(path, f"{where}.{key}", raw[key], low=1)
    if "seed" in raw:
        values["seed"] = _int(path, f"{where}.seed", raw["seed"], low=0)
    if "request_rate" in raw:
        values["request_rate"] = _rate(path, f"{where}.request_rate", raw["request_rate"])
    if "range_ratio" in raw:
        ratio = raw["range_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise ConfigError(
                f"must be a number from 0 to 1, not {ratio!r}",
                file=path,
                field=f"{where}.range_ratio",
                fix="write 1 for fixed lengths, 0.5 for lengths from half to full",
            )
        values["range_ratio"] = float(ratio)
    for key in ("cross_check", "cross_check_python"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(
                    f"must be a non-empty string, not {raw[key]!r}",
                    file=path,
                    field=f"{where}.{key}",
                    fix="quote it",
                )
            values[key] = raw[key]
    if values.get("cross_check", "auto") not in CROSS_CHECKS:
        raise ConfigError(
            f"is {values['cross_check']!r}",
            file=path,
            field=f"{where}.cross_check",
            fix='write "auto" (when SGLang is installed), "sglang" (always) or "off"',
        )
    return ServingLoad(**values)


def _int(path: Path, where: str, value: Any, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT_MAX:
        raise ConfigError(
            f"must be an integer from {low} to {INT_MAX}, not {value!r}",
            file=path,
            field=where,
            fix="fix it",
        )
    return value


def _rate(path: Path, where: str, value: Any) -> float | None:
    if value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f'must be requests per second > 0, or "inf", not {value!r}',
            file=path,
            field=where,
            fix='write e.g. 4.0, or "inf" to send every request at once',
        )
    return float(value)
