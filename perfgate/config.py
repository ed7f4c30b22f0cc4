"""Load and validate perfgate's configuration: `perfgate.toml` or `[tool.perfgate]`.

Every mistake is reported as a ConfigError naming the file and the field, with a fix.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.env_names import refuse_bad_env_names
from perfgate.equivalence import DEFAULT_MAX_NEAR_TIE_SHARE, DEFAULT_NEAR_TIE_MARGIN
from perfgate.errors import ConfigError
from perfgate.gate.judge import DEFAULT_ALPHA
from perfgate.serving.load import ServingLoad, parse_serving
from perfgate.sweep.config import parse_sweep_table
from perfgate.sweep.grid import SweepSpec

ENGINES = ("embedded", "sglang")
CONFIG_FILE = "perfgate.toml"
DEFAULT_HISTORY = "sqlite:///.perfgate/history.db"


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
    # up to this many runs in all.
    max_runs: int = 3
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
    # Serving under load besides the batch: `[scenarios.NAME.serving]` (perfgate.serving.load).
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


@dataclass(frozen=True)
class Config:
    """The whole configuration file, with paths resolved against its folder."""

    path: Path
    scenarios: Mapping[str, Scenario]
    default_scenarios: tuple[str, ...]
    baselines_dir: Path
    history_url: str
    # The chance of any false alarm the gate allows per session, split among the scenarios
    # (see perfgate.gate.judge for what it bounds exactly).
    alpha: float = DEFAULT_ALPHA
    sweeps: Mapping[str, SweepSpec] = field(default_factory=dict)  # `perfgate sweep --sweep`

    def select(self, names: tuple[str, ...] | list[str] = ()) -> list[Scenario]:
        """Return the named scenarios (or the defaults), refusing unknown names."""
        chosen = list(names) or list(self.default_scenarios)
        unknown = [n for n in chosen if n not in self.scenarios]
        if unknown:
            raise ConfigError(
                f"unknown scenario {unknown[0]!r}",
                file=self.path,
                fix=f"choose one of: {', '.join(sorted(self.scenarios))}",
            )
        return [self.scenarios[n] for n in chosen]


def find_config(start: Path | None = None) -> Path:
    """Find `perfgate.toml` (or a pyproject.toml with [tool.perfgate]) here or above."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "perfgate" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    raise ConfigError(
        f"no {CONFIG_FILE} found in {here} or above",
        fix=f"create {CONFIG_FILE} or pass --config PATH",
    )


def load_config(path: str | Path | None = None) -> Config:
    """Load, validate and resolve a configuration file."""
    config_path = Path(path) if path is not None else find_config()
    if not config_path.is_file():
        raise ConfigError("file not found", file=config_path, fix="pass an existing --config PATH")
    document = _read_toml(config_path)
    if config_path.name == "pyproject.toml":
        table = document.get("tool", {}).get("perfgate")
        if not isinstance(table, dict):
            raise ConfigError(
                "has no [tool.perfgate] table", file=config_path, fix="add one or use perfgate.toml"
            )
        # [tool.perfgate] holds the settings itself, beside [tool.perfgate.scenarios.NAME]
        # (and [tool.perfgate.sweeps.NAME]).
        settings = {k: v for k, v in table.items() if k not in ("scenarios", "sweeps")}
        document = {"perfgate": settings, "scenarios": table.get("scenarios", {})}
        if "sweeps" in table:
            document["sweeps"] = table["sweeps"]
    return _parse_config(config_path, document)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"is not valid TOML ({error})", file=path, fix="fix the syntax") from None
    except OSError as error:
        raise ConfigError(f"cannot be read ({error.strerror})", file=path) from None


# The longest scenario or profile name the history keeps: the length of its `runs.scenario`
# and `runs.profile` columns (perfgate/store/models.py).
HISTORY_NAME_MAX = 200


def _shown(name: str, width: int = 40) -> str:
    """A name as a message shows it: cut to `width` characters."""
    return name if len(name) <= width else name[: width - 3] + "..."


_TOP_KEYS = {"perfgate", "scenarios", "sweeps"}
_SETTINGS_KEYS = {"default_scenarios", "baselines", "history", "alpha"}


def _parse_config(path: Path, document: Mapping[str, Any]) -> Config:
    _refuse_unknown(path, "", document, _TOP_KEYS)
    settings = _table(path, "perfgate", document.get("perfgate", {}))
    _refuse_unknown(path, "perfgate", settings, _SETTINGS_KEYS)
    raw_scenarios = _table(path, "scenarios", document.get("scenarios", {}))
    if not raw_scenarios:
        raise ConfigError(
            "defines no scenario", file=path, field="scenarios", fix="add a [scenarios.NAME] table"
        )
    prompts_dir = path.parent
    scenarios = {
        name: parse_scenario(path, name, _table(path, f"scenarios.{name}", raw), prompts_dir)
        for name, raw in raw_scenarios.items()
    }
    defaults = tuple(
        _str_list(path, "perfgate.default_scenarios", settings.get("default_scenarios"))
        or [next(iter(scenarios))]
    )
    for name in defaults:
        if name not in scenarios:
            raise ConfigError(
                f"names unknown scenario {name!r}",
                file=path,
                field="perfgate.default_scenarios",
                fix=f"choose from {', '.join(sorted(scenarios))}",
            )
    baselines = _str(path, "perfgate.baselines", settings.get("baselines", "baselines"))
    history = _str(path, "perfgate.history", settings.get("history", DEFAULT_HISTORY))
    alpha = _fraction(path, "perfgate.alpha", settings.get("alpha", DEFAULT_ALPHA), open_=True)
    raw_sweeps = _table(path, "sweeps", document.get("sweeps", {}))
    sweeps = {
        name: parse_sweep_table(path, name, raw, list(scenarios))
        for name, raw in raw_sweeps.items()
    }
    return Config(
        path=path,
        scenarios=scenarios,
        default_scenarios=defaults,
        baselines_dir=(path.parent / baselines).resolve(),
        history_url=resolve_sqlite_url(history, path.parent),
        alpha=alpha,
        sweeps=sweeps,
    )


def resolve_sqlite_url(url: str, base: Path) -> str:
    """Make a relative `sqlite:///path` URL absolute against `base`; other URLs pass through."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str((base / url[len(prefix) :]).resolve())
    return url


_SCENARIO_INTS = (
    "steps",
    "topk",
    "draft_tokens",
    "tp",
    "max_running_requests",
    "max_new_tokens",
    "repeats",
    "warmup",
    "max_runs",
)
_SCENARIO_STRS = (
    "engine",
    "model",
    "draft",
    "algorithm",
    "dtype",
    "device",
    "python",
    "equivalence",
)
_SCENARIO_LISTS = ("extra_args", "spec_extra_args", "plain_extra_args")
_SCENARIO_FLOATS = (
    "startup_timeout_s",
    "request_timeout_s",
    "near_tie_margin",
    "plain_max_age_h",
    "gpu_release_timeout_s",
)
_SCENARIO_BOOLS = ("engine_metrics",)
EQUIVALENCE_MODES = ("gate", "report")
# The embedded engine's flag that accepts draft tokens at random instead of by the target.
SIMULATED_ACCEPTANCE = "--debug-simulate-accept-rate"
_SCENARIO_KEYS = {
    *_SCENARIO_INTS,
    *_SCENARIO_STRS,
    *_SCENARIO_LISTS,
    *_SCENARIO_FLOATS,
    *_SCENARIO_BOOLS,
    "prompts",
    "prompts_file",
    "env",
    "tolerances",
    "gated",
    "max_near_tie_share",
    "serving",
}


def check_history_name(name: str, *, field: str, file: Path | None = None) -> None:
    """Refuse a scenario or profile name longer than the history's column for it.

    A run under that name would be measured whole and then fail to record.
    """
    if len(name) > HISTORY_NAME_MAX:
        raise ConfigError(
            f"the name is {len(name)} characters long; the history keeps at most "
            f"{HISTORY_NAME_MAX}",
            file=file,
            field=field,
            fix=f"shorten it to {HISTORY_NAME_MAX} characters or fewer",
        )


def parse_scenario(path: Path, name: str, raw: Mapping[str, Any], base: Path) -> Scenario:
    """Validate one `[scenarios.NAME]` table into a Scenario."""
    where = f"scenarios.{name}"
    check_history_name(name, field=f"scenarios.{_shown(name)}", file=path)
    _refuse_unknown(path, where, raw, _SCENARIO_KEYS)
    for key in ("engine", "model", "draft"):
        if key not in raw:
            raise ConfigError("is required", file=path, field=f"{where}.{key}", fix="set it")
    values: dict[str, Any] = {"name": name}
    for key in _SCENARIO_INTS:
        if key in raw:
            values[key] = _positive_int(
                path, f"{where}.{key}", raw[key], allow_zero=key == "warmup"
            )
    for key in _SCENARIO_STRS:
        if key in raw:
            values[key] = _str(path, f"{where}.{key}", raw[key])
    for key in _SCENARIO_LISTS:
        if key in raw:
            values[key] = tuple(_str_list(path, f"{where}.{key}", raw[key]))
    for key in _SCENARIO_FLOATS:
        if key in raw:
            values[key] = _positive_float(path, f"{where}.{key}", raw[key])
    for key in _SCENARIO_BOOLS:
        if key in raw:
            values[key] = _bool(path, f"{where}.{key}", raw[key])
    if values["engine"] not in ENGINES:
        raise ConfigError(
            f"unknown engine {values['engine']!r}",
            file=path,
            field=f"{where}.engine",
            fix=f"use one of {', '.join(ENGINES)}",
        )
    values["env"] = _str_table(path, f"{where}.env", raw.get("env", {}))
    refuse_bad_env_names(values["env"], file=path, field=f"{where}.env")
    _probe_stride(path, f"{where}.env", values["env"])
    values["tolerances"] = _tolerances(path, f"{where}.tolerances", raw.get("tolerances", {}))
    values["prompts"] = _prompts(path, where, raw, base)
    if "max_near_tie_share" in raw:
        field_name = f"{where}.max_near_tie_share"
        values["max_near_tie_share"] = _fraction(path, field_name, raw["max_near_tie_share"])
    if "gated" in raw:
        values["gated"] = _metric_list(path, f"{where}.gated", raw["gated"])
    if "serving" in raw:
        values["serving"] = parse_serving(path, f"{where}.serving", raw["serving"])
    _check_serving_metrics(path, where, values)
    _check_equivalence_mode(path, where, values)
    return Scenario(**values)


def _check_serving_metrics(path: Path, where: str, values: Mapping[str, Any]) -> None:
    """A serving metric can be gated only where the scenario measures serving."""
    from perfgate.serving.sglang_bench import FIGURES
    from perfgate.serving.summary import SERVING_METRICS

    serving = values.get("serving")
    for name in values.get("gated", ()):
        if name in SERVING_METRICS and serving is None:
            raise ConfigError(
                f"gates {name!r}, which only a serving load measures",
                file=path,
                field=f"{where}.gated",
                fix=f"add a [{where}.serving] table (request_rate, num_prompts...), or drop it",
            )
        if name in FIGURES and (serving is None or serving.cross_check == "off"):
            raise ConfigError(
                f"gates {name!r}, which only SGLang's cross-check measures",
                file=path,
                field=f"{where}.gated",
                fix=f'set {where}.serving.cross_check = "sglang", or drop it',
            )


def _check_equivalence_mode(path: Path, where: str, values: Mapping[str, Any]) -> None:
    """`equivalence` is "gate" or "report"; simulated acceptance cannot be gated."""
    mode = values.get("equivalence", "gate")
    if mode not in EQUIVALENCE_MODES:
        raise ConfigError(
            f"is {mode!r}",
            file=path,
            field=f"{where}.equivalence",
            fix='write "gate" (outputs must be equivalent) or "report" (compared, not gated)',
        )
    flags = (*values.get("extra_args", ()), *values.get("spec_extra_args", ()))
    simulated = any(flag.startswith(SIMULATED_ACCEPTANCE) for flag in flags)
    if simulated and mode == "gate":
        raise ConfigError(
            f"{SIMULATED_ACCEPTANCE} makes the speculative outputs differ from plain decoding "
            "by design, so its equivalence can only fail",
            file=path,
            field=f"{where}.equivalence",
            fix='set equivalence = "report" (the outputs are compared and reported, not gated)',
        )


def _prompts(path: Path, where: str, raw: Mapping[str, Any], base: Path) -> tuple[str, ...]:
    from perfgate.prompts import load_prompt_file, load_prompt_set

    if "prompts" in raw and "prompts_file" in raw:
        raise ConfigError(
            "sets both prompts and prompts_file", file=path, field=where, fix="keep one of them"
        )
    if "prompts_file" in raw:
        file = base / _str(path, f"{where}.prompts_file", raw["prompts_file"])
        return load_prompt_file(file)
    value = raw.get("prompts", "default")
    if isinstance(value, str):
        return load_prompt_set(value, file=path, field=f"{where}.prompts")
    prompts = _str_list(path, f"{where}.prompts", value)
    if not prompts:
        raise ConfigError("is empty", file=path, field=f"{where}.prompts", fix="list some prompts")
    return tuple(prompts)


def _tolerances(path: Path, where: str, raw: Any) -> dict[str, float]:
    table = _table(path, where, raw)
    result: dict[str, float] = {}
    for metric, value in table.items():
        if metric not in metrics.METRICS:
            raise ConfigError(
                f"unknown metric {metric!r}",
                file=path,
                field=where,
                fix=f"use one of {', '.join(metrics.METRICS)}",
            )
        tolerance = _positive_float(path, f"{where}.{metric}", value)
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
    names = _str_list(path, where, raw)
    for name in names:
        if name not in metrics.METRICS:
            raise ConfigError(
                f"unknown metric {name!r}",
                file=path,
                field=where,
                fix=f"use metrics from: {', '.join(metrics.METRICS)}",
            )
    return tuple(names)


def _refuse_unknown(path: Path, where: str, raw: Mapping[str, Any], known: set[str]) -> None:
    for key in raw:
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r}",
                file=path,
                field=where or None,
                fix=f"use one of {', '.join(sorted(known))}",
            )


def _table(path: Path, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError("must be a table", file=path, field=where, fix=f"write [{where}]")
    return value


def _str(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"must be a non-empty string, not {value!r}", file=path, field=where, fix="quote it"
        )
    return value


def _str_list(path: Path, where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            "must be a list of strings", file=path, field=where, fix='write ["a", "b"]'
        )
    return value


def _probe_stride(path: Path, where: str, env: Mapping[str, str]) -> None:
    from perfgate.probe import EVERY_VARIABLE, parse_every

    try:
        parse_every(env.get(EVERY_VARIABLE))
    except ValueError as error:
        raise ConfigError(str(error), file=path, field=f"{where}.{EVERY_VARIABLE}") from None


def _str_table(path: Path, where: str, value: Any) -> dict[str, str]:
    table = _table(path, where, value)
    for key, item in table.items():
        if not isinstance(item, str):
            raise ConfigError(
                f"must be a string, not {item!r}", file=path, field=f"{where}.{key}", fix="quote it"
            )
    return dict(table)


def _positive_int(path: Path, where: str, value: Any, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"must be an integer >= {low}, not {value!r}", file=path, field=where, fix="fix it"
        )
    return value


def _fraction(path: Path, where: str, value: Any, *, open_: bool = False) -> float:
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


def _bool(path: Path, where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(
            f"must be true or false, not {value!r}", file=path, field=where, fix="write true"
        )
    return value


def _positive_float(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(
            f"must be a number > 0, not {value!r}", file=path, field=where, fix="fix it"
        )
    return float(value)
