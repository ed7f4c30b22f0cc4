"""Load and validate perfgate's configuration: `perfgate.toml` or `[tool.perfgate]`.

Every mistake is reported as a ConfigError naming the file and the field, with a fix.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.spec.document import (
    CONFIG_FILE,
    DEFAULT_ALPHA,
    DEFAULT_HISTORY,
    SETTINGS_KEYS,
    TOP_KEYS,
)
from perfgate.spec.probe import EVERY_VARIABLE, parse_every
from perfgate.spec.scenario import (
    ENGINES,
    REQUIRED_FIELDS,
    SCENARIO_KEYS,
    Scenario,
    parse_fields,
)
from perfgate.spec.serving import CROSS_CHECK_METRICS, SERVING_METRICS
from perfgate.spec.sweep import SweepSpec, parse_sweep_table
from perfgate.spec.values import fraction, refuse_unknown, str_list, string, table

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_HISTORY",
    "ENGINES",
    "EQUIVALENCE_MODES",
    "HISTORY_NAME_MAX",
    "SIMULATED_ACCEPTANCE",
    "Config",
    "Scenario",
    "check_history_name",
    "find_config",
    "load_config",
    "locate_config",
    "parse_scenario",
    "resolve_sqlite_url",
]


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

    def select(
        self, names: tuple[str, ...] | list[str] = (), engine: str | None = None
    ) -> list[Scenario]:
        """Return the named scenarios (or the defaults), refusing unknown names; on `engine`
        (the --engine override) where one is given. Every command chooses its scenarios
        here."""
        chosen = list(names) or list(self.default_scenarios)
        unknown = [n for n in chosen if n not in self.scenarios]
        if unknown:
            raise ConfigError(
                f"unknown scenario {unknown[0]!r}",
                file=self.path,
                fix=f"choose one of: {', '.join(sorted(self.scenarios))}",
            )
        chosen_scenarios = [self.scenarios[n] for n in chosen]
        return [s.with_engine(engine) for s in chosen_scenarios] if engine else chosen_scenarios


def find_config(start: Path | None = None) -> Path:
    """Find `perfgate.toml` (or a pyproject.toml with [tool.perfgate]) here or above."""
    found = locate_config(start)
    if found is None:
        here = (start or Path.cwd()).resolve()
        raise ConfigError(
            f"no {CONFIG_FILE} found in {here} or above",
            fix=f"create {CONFIG_FILE} or pass --config PATH",
        )
    return found


def locate_config(start: Path | None = None) -> Path | None:
    """The configuration file `find_config` finds; None where there is none. A command that
    needs no configuration goes on without one, but never past one it found: a
    `perfgate.toml` that is not a file is a ConfigError, as its contents' mistakes are."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        if candidate.exists() or candidate.is_symlink():
            raise ConfigError(
                "is not a file perfgate can read (a folder, a device or a broken link)",
                file=candidate,
                fix="make it the scenarios' file, or remove it and pass --config PATH",
            )
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "perfgate" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    return None


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
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot be read ({error.strerror})", file=path) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at {_place(data, error.start)})",
            file=path,
            fix="save it as UTF-8, as TOML requires (or remove that byte)",
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"is not valid TOML ({error})", file=path, fix="fix the syntax") from None


def _place(data: bytes, offset: int) -> str:
    """Where byte `offset` of `data` lies, as an editor counts: line and column, from 1."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


# The longest scenario or profile name the history keeps: the length of its `runs.scenario`
# and `runs.profile` columns (perfgate/store/models.py).
HISTORY_NAME_MAX = 200


def _shown(name: str, width: int = 40) -> str:
    """A name as a message shows it: cut to `width` characters."""
    return name if len(name) <= width else name[: width - 3] + "..."


def _parse_config(path: Path, document: Mapping[str, Any]) -> Config:
    refuse_unknown(path, "", document, TOP_KEYS)
    settings = table(path, "perfgate", document.get("perfgate", {}))
    refuse_unknown(path, "perfgate", settings, SETTINGS_KEYS)
    raw_scenarios = table(path, "scenarios", document.get("scenarios", {}))
    if not raw_scenarios:
        raise ConfigError(
            "defines no scenario", file=path, field="scenarios", fix="add a [scenarios.NAME] table"
        )
    prompts_dir = path.parent
    scenarios = {
        name: parse_scenario(path, name, table(path, f"scenarios.{name}", raw), prompts_dir)
        for name, raw in raw_scenarios.items()
    }
    listed = str_list(path, "perfgate.default_scenarios", settings.get("default_scenarios"))
    if "default_scenarios" in settings and not listed:
        raise ConfigError(
            "lists no scenario",
            file=path,
            field="perfgate.default_scenarios",
            fix="name the scenarios a plain `perfgate run` measures, or leave it out for the "
            "first scenario of the file",
        )
    defaults = tuple(listed or [next(iter(scenarios))])
    for name in defaults:
        if name not in scenarios:
            raise ConfigError(
                f"names unknown scenario {name!r}",
                file=path,
                field="perfgate.default_scenarios",
                fix=f"choose from {', '.join(sorted(scenarios))}",
            )
    baselines = string(path, "perfgate.baselines", settings.get("baselines", "baselines"))
    history = string(path, "perfgate.history", settings.get("history", DEFAULT_HISTORY))
    alpha = fraction(path, "perfgate.alpha", settings.get("alpha", DEFAULT_ALPHA), open_=True)
    raw_sweeps = table(path, "sweeps", document.get("sweeps", {}))
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


EQUIVALENCE_MODES = ("gate", "report")
# The embedded engine's flag that accepts draft tokens at random instead of by the target.
SIMULATED_ACCEPTANCE = "--debug-simulate-accept-rate"


def check_history_name(name: str, *, field: str, file: Path | None = None) -> None:
    """Refuse a scenario or profile name the history or a baseline file cannot hold: longer
    than the history's column for it (a run under it would be measured whole and then fail
    to record), or no single file name (baselines/PROFILE/SCENARIO.json would lie elsewhere).
    """
    if not name or name in (".", "..") or any(c in name for c in "/\\") or not name.isprintable():
        raise ConfigError(
            f"{_shown(name)!r} is not a name a baseline file can take",
            file=file,
            field=field,
            fix="use letters, digits, '-', '_' and '.': no '/', '\\', line break, or . and ..",
        )
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
    refuse_unknown(path, where, raw, SCENARIO_KEYS)
    for key in REQUIRED_FIELDS:
        if key not in raw:
            raise ConfigError("is required", file=path, field=f"{where}.{key}", fix="set it")
    values: dict[str, Any] = {"name": name, **parse_fields(path, where, raw)}
    if values["engine"] not in ENGINES:
        raise ConfigError(
            f"unknown engine {values['engine']!r}",
            file=path,
            field=f"{where}.engine",
            fix=f"use one of {', '.join(ENGINES)}",
        )
    _probe_stride(path, f"{where}.env", values.get("env", {}))
    values["prompts"] = _prompts(path, where, raw, base)
    _check_serving_metrics(path, where, values)
    _check_equivalence_mode(path, where, values)
    return Scenario(**values)


def _check_serving_metrics(path: Path, where: str, values: Mapping[str, Any]) -> None:
    """A serving metric can be gated only where the scenario measures serving."""
    serving = values.get("serving")
    for name in values.get("gated", ()):
        if name in SERVING_METRICS and serving is None:
            raise ConfigError(
                f"gates {name!r}, which only a serving load measures",
                file=path,
                field=f"{where}.gated",
                fix=f"add a [{where}.serving] table (request_rate, num_prompts...), or drop it",
            )
        if name in CROSS_CHECK_METRICS and (serving is None or serving.cross_check == "off"):
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
        file = base / string(path, f"{where}.prompts_file", raw["prompts_file"])
        return load_prompt_file(file)
    value = raw.get("prompts", "default")
    if isinstance(value, str):
        return load_prompt_set(value, file=path, field=f"{where}.prompts")
    prompts = str_list(path, f"{where}.prompts", value)
    if not prompts:
        raise ConfigError("is empty", file=path, field=f"{where}.prompts", fix="list some prompts")
    blank = next((i for i, p in enumerate(prompts) if not p.strip()), None)
    if blank is not None:  # a server refuses it, after its launch
        raise ConfigError(
            f"prompt {blank + 1} of {len(prompts)} is empty",
            file=path,
            field=f"{where}.prompts",
            fix="write some text in it, or remove it",
        )
    return tuple(prompts)


def _probe_stride(path: Path, where: str, env: Mapping[str, str]) -> None:
    try:
        parse_every(env.get(EVERY_VARIABLE))
    except ValueError as error:
        raise ConfigError(str(error), file=path, field=f"{where}.{EVERY_VARIABLE}") from None
