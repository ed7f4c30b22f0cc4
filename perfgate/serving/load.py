"""The load a serving scenario sends: how many requests, how they arrive, how long they are.

Lengths follow ``sglang.benchmark.serving``'s random datasets (SGLang 0.5.23,
``benchmark/datasets/common.compute_random_lens``): each uniform between
``max(int(length * range_ratio), 1)`` and ``length``; ``range_ratio = 1`` makes them fixed.
Input lengths are in characters of the scenario's prompts, repeated or cut (on the embedded
engine's byte-level vocabulary a character of ASCII text is one token); output lengths are
tokens, exact, since requests ignore EOS.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError

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


@dataclass(frozen=True)
class LoadRequest:
    prompt: str
    max_new_tokens: int


def build_requests(
    load: ServingLoad, prompts: Sequence[str], max_new_tokens: int
) -> list[LoadRequest]:
    """The requests of one load, in sending order: the same for every repeat and server."""
    rng = random.Random(load.seed)
    outputs = _lengths(rng, load.output_len or max_new_tokens, load.range_ratio, load.num_prompts)
    requests = []
    for i, output_len in enumerate(outputs):
        prompt = prompts[i % len(prompts)]
        if load.input_len is not None:
            (length,) = _lengths(rng, load.input_len, load.range_ratio, 1)
            prompt = (prompt * (length // len(prompt) + 1))[:length]
        requests.append(LoadRequest(prompt, output_len))
    return requests


def arrival_gaps_s(load: ServingLoad) -> list[float]:
    """Seconds to wait after sending each request (exponential at the rate; 0 when inf)."""
    if load.request_rate is None:
        return [0.0] * load.num_prompts
    rng = random.Random(load.seed + 1)
    return [rng.expovariate(load.request_rate) for _ in range(load.num_prompts)]


def _lengths(rng: random.Random, full: int, range_ratio: float, count: int) -> list[int]:
    low = max(int(full * range_ratio), 1)
    return [rng.randint(low, full) for _ in range(count)]


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
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"must be an integer >= {low}, not {value!r}", file=path, field=where, fix="fix it"
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
