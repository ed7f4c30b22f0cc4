"""The gate's options, defined once: `--perfgate-NAME` in pytest, `--NAME` in `perfgate run`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.config import ENGINES
from perfgate.pipeline import GateOptions


@dataclass(frozen=True)
class Option:
    name: str  # "db" -> --perfgate-db / --db
    help: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    env: str | None = None  # the variable that supplies the default


OPTIONS: tuple[Option, ...] = (
    Option(
        "config",
        "perfgate.toml (or pyproject.toml with [tool.perfgate]) to read; "
        "default: the first one found from the current folder up",
        {"metavar": "PATH"},
    ),
    Option(
        "scenario",
        "scenario to run (repeatable); default: the config's default_scenarios",
        {"action": "append", "metavar": "NAME", "default": []},
    ),
    Option("engine", "run the scenarios on this engine instead", {"choices": ENGINES}),
    Option(
        "db",
        "history database, any SQLAlchemy URL; default: the config's history "
        "(sqlite:///.perfgate/history.db)",
        {"metavar": "URL"},
        env="PERFGATE_DB_URL",
    ),
    Option("baselines", "folder of baseline files; default: the config's", {"metavar": "DIR"}),
    Option(
        "profile",
        "runner profile naming the baselines to use; default: from the hardware (cpu, h200x8...)",
        {"metavar": "NAME"},
        env="PERFGATE_PROFILE",
    ),
    Option(
        "report",
        "where to write the HTML report (default reports/index.html; '' writes none)",
        {"metavar": "PATH"},
    ),
    Option(
        "no-gate",
        "measure and record, but judge nothing (to record a run for a first baseline)",
        {"action": "store_true", "default": False},
    ),
    Option(
        "require-baseline",
        "judge only against a matching reviewed baseline: a missing or non-matching one is "
        "exit 64 with the commands that make one (the default where CI=true); without it, a "
        "machine with no reviewed baseline is judged against its own recorded runs",
        {"action": "store_true", "default": False},
    ),
    Option(
        "refresh-plain",
        "measure the plain twin even where the history has reusable figures for it "
        "(scenarios with plain_max_age_h; runs on main always refresh)",
        {"action": "store_true", "default": False},
    ),
)


def add_options(add: Callable[..., Any], flag_prefix: str, dest_prefix: str) -> None:
    """Declare every option through `add` (argparse's add_argument or pytest's addoption)."""
    for option in OPTIONS:
        dest = dest_prefix + option.name.replace("-", "_")
        add(flag_prefix + option.name, dest=dest, help=option.help, **option.kwargs)


def gate_options(
    get: Callable[[str], Any], environ: Mapping[str, str] | None = None
) -> GateOptions:
    """Build GateOptions from option values, `get("db")` giving the value of `db`."""
    env = os.environ if environ is None else environ

    def value(name: str) -> Any:
        option = next(o for o in OPTIONS if o.name == name)
        given = get(name.replace("-", "_"))
        return env.get(option.env) if given is None and option.env else given

    return GateOptions(
        config=value("config"),
        scenarios=tuple(value("scenario") or ()),
        engine=value("engine"),
        db=value("db"),
        baselines=value("baselines"),
        profile=value("profile"),
        report=value("report"),
        gate=not value("no-gate"),
        refresh_plain=bool(value("refresh-plain")),
        require_baseline=bool(value("require-baseline")),
    )


def option_flags(options: GateOptions, flag_prefix: str = "--perfgate-") -> list[str]:
    """Turn GateOptions back into command-line flags (for `perfgate run` calling pytest)."""
    flags: list[str] = []
    singles = {
        "config": options.config,
        "engine": options.engine,
        "db": options.db,
        "baselines": options.baselines,
        "profile": options.profile,
        "report": options.report,
    }
    for name, given in singles.items():
        if given is not None:
            flags.append(f"{flag_prefix}{name}={given}")
    flags += [f"{flag_prefix}scenario={name}" for name in options.scenarios]
    if not options.gate:
        flags.append(f"{flag_prefix}no-gate")
    if options.refresh_plain:
        flags.append(f"{flag_prefix}refresh-plain")
    if options.require_baseline:
        flags.append(f"{flag_prefix}require-baseline")
    return flags
