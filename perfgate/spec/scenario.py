"""The Scenario and what each of its fields means, declared once. Pure.

`SCENARIO_FIELDS` says, for every field of `Scenario`: the TOML keys that set it, the
validator of its value, which server(s) it shapes, the SGLang flag (by role, as
perfgate.sglang.facts names them) it becomes, and whether it joins the fingerprint's
scenario digest and the plain twin's reuse key. Everything that used to list fields by hand
derives from it: the keys the config accepts (`SCENARIO_KEYS`), the digest's fields
(`digest_fields`), the plain side of the reuse key (`plain_side`), and the flags perfgate sets
itself (`OWNED_FIELDS`). A field missing from the table fails at import.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.env_names import refuse_bad_env_names
from perfgate.equivalence import DEFAULT_MAX_NEAR_TIE_SHARE, DEFAULT_NEAR_TIE_MARGIN
from perfgate.errors import ConfigError
from perfgate.spec import values
from perfgate.spec.serving import ServingLoad, parse_serving

ENGINES = ("embedded", "sglang")


@dataclass(frozen=True)
class Scenario:
    """One configuration to measure: a speculative server and its plain twin."""

    name: str
    engine: str
    model: str
    draft: str
    algorithm: str = "EAGLE3"
    steps: int = 3
    topk: int = 1
    draft_tokens: int = 4
    tp: int = 1
    dtype: str | None = None
    device: str | None = None
    max_running_requests: int | None = None
    prompts: tuple[str, ...] = ()
    max_new_tokens: int = 64
    repeats: int = 5
    warmup: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    spec_extra_args: tuple[str, ...] = ()
    plain_extra_args: tuple[str, ...] = ()
    tolerances: Mapping[str, float] = field(default_factory=dict)
    gated: tuple[str, ...] = metrics.DEFAULT_GATED
    python: str | None = None
    startup_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    # The gate measures another run (a fresh server launch) while a verdict is inconclusive,
    # up to this many runs in all: the first look after the runs the baseline's spread asks
    # for (perfgate.gate.planning), each later one as many more; all within max_runner_s of
    # the runner's time, as the first run's time says.
    max_runs: int = 3
    max_runner_s: float = 600.0
    # Equivalence: a divergence whose plain top-1/top-2 logprob gap is at most this (nats) is a
    # near tie, allowed for up to this share of the prompts.
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN
    max_near_tie_share: float = DEFAULT_MAX_NEAR_TIE_SHARE
    # "gate": outputs that are not equivalent fail the run; "report": they are compared and
    # reported but decide nothing (a scenario whose acceptance is simulated, say).
    equivalence: str = "gate"
    # SGLang only: --enable-metrics (and its GPU timer per forward category) on both servers.
    engine_metrics: bool = False
    # Reuse the plain twin's figures from the history when a run with the same plain
    # fingerprint is younger than this; unset: always measure the twin.
    plain_max_age_h: float | None = None
    # How long to wait for a stopped server's GPU memory to be released before the next launch.
    gpu_release_timeout_s: float = 300.0
    # Serving under load besides the batch: `[scenarios.NAME.serving]` (perfgate.spec.serving).
    serving: ServingLoad | None = None

    def with_engine(self, engine: str) -> Scenario:
        """Return this scenario run on another engine (the `--engine` override)."""
        if engine not in ENGINES:
            raise ConfigError(
                f"unknown engine {engine!r}",
                field="--engine",
                fix=f"use one of {', '.join(ENGINES)}",
            )
        return replace(self, engine=engine)


class Shapes(enum.Enum):
    """Which server's numbers a field can change."""

    BOTH = "both"  # the speculative server and its plain twin
    SPEC = "spec"  # the speculative server only
    PLAIN = "plain"  # the plain twin only
    # How a server is measured (how many repeats, the serving load), not the servers' work.
    MEASUREMENT = "measurement"
    # Naming, judging, timeouts and policies: no server's number.
    NEITHER = "neither"


SERVER_SHAPES = (Shapes.BOTH, Shapes.SPEC, Shapes.PLAIN)


class Digest(enum.Enum):
    """How a field joins the fingerprint's scenario digest."""

    ALWAYS = "always"
    # Only when true: the digests recorded before the field existed stay valid.
    WHEN_ON = "when on"
    # Not in the digest: its performance-relevant entries (NCCL_*, CUDA_*...) join the
    # fingerprint itself as `env.NAME` (perfgate.fingerprint.collect_fingerprint).
    AS_ENV = "as env"
    NO = "no"


Parser = Callable[[Path, str, Any], Any]


@dataclass(frozen=True)
class FieldSpec:
    """What one Scenario field means (see the module doc)."""

    shapes: Shapes
    digest: Digest = Digest.NO
    plain_reuse: bool = False  # part of the plain side of the plain twin's reuse key
    flag: str | None = None  # the SGLang flag's role (perfgate.sglang.facts), set by perfgate
    # Validates the field's TOML value; None where perfgate.config reads the field itself.
    parse: Parser | None = None
    keys: tuple[str, ...] | None = None  # the TOML keys that set it; None: its own name


def _env(path: Path, where: str, raw: Any) -> dict[str, str]:
    env = values.str_table(path, where, raw)
    refuse_bad_env_names(env, file=path, field=where)
    return env


def _tolerances(path: Path, where: str, raw: Any) -> dict[str, float]:
    result: dict[str, float] = {}
    for metric, value in values.table(path, where, raw).items():
        if metric not in metrics.METRICS:
            raise ConfigError(
                f"unknown metric {metric!r}",
                file=path,
                field=where,
                fix=f"use one of {', '.join(metrics.METRICS)}",
            )
        tolerance = values.positive_float(path, f"{where}.{metric}", value)
        if tolerance >= 1.0:
            raise ConfigError(
                f"is {tolerance}, a fraction of 1 or more",
                file=path,
                field=f"{where}.{metric}",
                fix="write a fraction: 0.03 means 3%",
            )
        result[metric] = tolerance
    return result


def _metric_list(path: Path, where: str, raw: Any) -> tuple[str, ...]:
    names = values.str_list(path, where, raw)
    if not names:
        raise ConfigError(
            "lists no metric: the gate would judge nothing and pass every run",
            file=path,
            field=where,
            fix="name the metrics to gate, or leave `gated` out for the default "
            f"({', '.join(metrics.DEFAULT_GATED)}); `perfgate run --no-gate` records "
            "without judging",
        )
    for name in names:
        if name not in metrics.METRICS:
            raise ConfigError(
                f"unknown metric {name!r}",
                file=path,
                field=where,
                fix=f"use metrics from: {', '.join(metrics.METRICS)}",
            )
    return tuple(names)


BOTH, SPEC, PLAIN = Shapes.BOTH, Shapes.SPEC, Shapes.PLAIN
ALWAYS = Digest.ALWAYS

# In the order of the speculative flags on a command line (algorithm before the draft).
SCENARIO_FIELDS: Mapping[str, FieldSpec] = {
    # The table's name in the file; runs are recorded under it.
    "name": FieldSpec(Shapes.NEITHER, keys=()),
    # Also joins the fingerprint as `engine`, the plain reuse key with it.
    "engine": FieldSpec(BOTH, ALWAYS, parse=values.string),
    "model": FieldSpec(BOTH, ALWAYS, plain_reuse=True, flag="model", parse=values.string),
    "tp": FieldSpec(BOTH, ALWAYS, plain_reuse=True, flag="tp", parse=values.positive_int),
    "dtype": FieldSpec(BOTH, ALWAYS, plain_reuse=True, flag="dtype", parse=values.string),
    # The embedded engine's own --device; an SGLang scenario passes SGLang's in extra_args.
    "device": FieldSpec(BOTH, ALWAYS, plain_reuse=True, parse=values.string),
    "max_running_requests": FieldSpec(
        BOTH, ALWAYS, plain_reuse=True, flag="max_running_requests", parse=values.positive_int
    ),
    "extra_args": FieldSpec(BOTH, ALWAYS, plain_reuse=True, parse=values.str_tuple),
    "prompts": FieldSpec(BOTH, ALWAYS, plain_reuse=True, keys=("prompts", "prompts_file")),
    "max_new_tokens": FieldSpec(BOTH, ALWAYS, plain_reuse=True, parse=values.positive_int),
    # SGLang only: --enable-metrics. In the plain key as a value; in the digest only when on.
    "engine_metrics": FieldSpec(
        BOTH, Digest.WHEN_ON, plain_reuse=True, flag="metrics", parse=values.boolean
    ),
    "env": FieldSpec(BOTH, Digest.AS_ENV, parse=_env),
    "plain_extra_args": FieldSpec(PLAIN, ALWAYS, plain_reuse=True, parse=values.str_tuple),
    "algorithm": FieldSpec(SPEC, ALWAYS, flag="algorithm", parse=values.string),
    "draft": FieldSpec(SPEC, ALWAYS, flag="draft", parse=values.string),
    "steps": FieldSpec(SPEC, ALWAYS, flag="steps", parse=values.positive_int),
    # A tree (topk > 1) can also change the plain twin's scheduling on some SGLang releases;
    # the fingerprint's `overlap_schedule` says how both servers ran.
    "topk": FieldSpec(SPEC, ALWAYS, flag="topk", parse=values.positive_int),
    "draft_tokens": FieldSpec(SPEC, ALWAYS, flag="draft_tokens", parse=values.positive_int),
    "spec_extra_args": FieldSpec(SPEC, ALWAYS, parse=values.str_tuple),
    # How many timed runs (and untimed ones) make a figure: not the servers' work, but the
    # reused plain figures must be as many as a fresh measurement would give.
    "repeats": FieldSpec(Shapes.MEASUREMENT, plain_reuse=True, parse=values.positive_int),
    "warmup": FieldSpec(Shapes.MEASUREMENT, plain_reuse=True, parse=values.count),
    # The serving load: it shapes the serving metrics only, and is not in the digest.
    "serving": FieldSpec(Shapes.MEASUREMENT, parse=parse_serving),
    # Which interpreter runs the servers: what it brings (the engine's and torch's releases)
    # joins the fingerprint as the server reports it.
    "python": FieldSpec(Shapes.NEITHER, parse=values.string),
    "tolerances": FieldSpec(Shapes.NEITHER, parse=_tolerances),
    "gated": FieldSpec(Shapes.NEITHER, parse=_metric_list),
    "max_runs": FieldSpec(Shapes.NEITHER, parse=values.positive_int),
    "max_runner_s": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
    "near_tie_margin": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
    "max_near_tie_share": FieldSpec(Shapes.NEITHER, parse=values.fraction),
    "equivalence": FieldSpec(Shapes.NEITHER, parse=values.string),
    "plain_max_age_h": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
    "startup_timeout_s": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
    "request_timeout_s": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
    "gpu_release_timeout_s": FieldSpec(Shapes.NEITHER, parse=values.positive_float),
}


def unclassified(cls: type, table: Mapping[str, FieldSpec]) -> list[str]:
    """The fields of dataclass `cls` that `table` does not describe, and the table's names
    that are no field of it: empty when the two agree."""
    names = [f.name for f in dataclasses.fields(cls)]
    return [n for n in names if n not in table] + [n for n in table if n not in names]


def _keys(name: str, spec: FieldSpec) -> tuple[str, ...]:
    return (name,) if spec.keys is None else spec.keys


def field_keys(name: str) -> tuple[str, ...]:
    """The TOML keys that set field `name` of a scenario."""
    return _keys(name, SCENARIO_FIELDS[name])


if unclassified(Scenario, SCENARIO_FIELDS):  # a new field must say what it means
    raise TypeError(
        f"perfgate.spec.scenario: Scenario fields {unclassified(Scenario, SCENARIO_FIELDS)} "
        "are not described in SCENARIO_FIELDS"
    )
if any(s.parse and s.keys is not None for s in SCENARIO_FIELDS.values()):
    raise TypeError("perfgate.spec.scenario: a field with a validator is set by its own key")

# The keys a `[scenarios.NAME]` table may hold.
SCENARIO_KEYS = frozenset(key for name in SCENARIO_FIELDS for key in field_keys(name))
# Every `[scenarios.NAME]` table must set these.
REQUIRED_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(Scenario)
    if f.default is dataclasses.MISSING
    and f.default_factory is dataclasses.MISSING
    and field_keys(f.name)
)
# The scenario field for each flag perfgate sets on the servers itself, by flag role.
OWNED_FIELDS = {spec.flag: name for name, spec in SCENARIO_FIELDS.items() if spec.flag}
# The speculative server's own flags, in command-line order.
SPECULATIVE_FLAGS = tuple(
    (name, spec.flag)
    for name, spec in SCENARIO_FIELDS.items()
    if spec.flag and spec.shapes is Shapes.SPEC
)


def parse_fields(path: Path, where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the keys of a `[scenarios.NAME]` table (at `where` in `path`) that set a field
    through its own validator; the others (name, prompts) are perfgate.config's to read."""
    return {
        name: spec.parse(path, f"{where}.{name}", raw[name])
        for name, spec in SCENARIO_FIELDS.items()
        if spec.parse is not None and name in raw
    }


def flag_role(name: str) -> str:
    """The role of the SGLang flag that field `name` becomes (perfgate.sglang.facts)."""
    role = SCENARIO_FIELDS[name].flag
    if role is None:
        raise LookupError(f"the scenario field {name!r} becomes no flag")
    return role


def digest_fields(scenario: Scenario) -> dict[str, Any]:
    """The fields of `scenario` its digest hashes (perfgate.fingerprint.scenario_digest)."""
    shaping: dict[str, Any] = {}
    for name, spec in SCENARIO_FIELDS.items():
        value = getattr(scenario, name)
        if spec.digest is Digest.ALWAYS:
            shaping[name] = value
        elif spec.digest is Digest.WHEN_ON and value:
            shaping[name] = True
    return shaping


def plain_side(scenario: Scenario) -> dict[str, Any]:
    """The fields of `scenario` that shape its plain twin's figures (perfgate.plain_reuse)."""
    return {name: getattr(scenario, name) for name, s in SCENARIO_FIELDS.items() if s.plain_reuse}
