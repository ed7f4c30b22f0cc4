"""The options several commands share, declared once, and what they resolve to: `Settings`.

`perfgate CMD --NAME` and pytest's `--perfgate-NAME` take their flags from the one table here
(`OPTIONS`); a command parses its flags, then `settings_from(args)` resolves them once into a
frozen `Settings` that the command's `run(settings, args)` and its helpers take. Light on
purpose: `perfgate --help` imports this module and nothing heavy.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.spec.options import GateOptions


def _engines() -> tuple[str, ...]:
    from perfgate.config import ENGINES  # only when a command's flags are declared

    return tuple(ENGINES)


@dataclass(frozen=True)
class Option:
    name: str  # "db" -> --perfgate-db / --db
    help: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    env: str | None = None  # the variable that supplies the default
    choices: Callable[[], Iterable[str]] | None = None  # read when the flag is declared

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


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
    Option("engine", "run the scenarios on this engine instead", choices=_engines),
    Option(
        "db",
        "history database, any SQLAlchemy URL; default: $PERFGATE_DB_URL, else the config's "
        "history (sqlite:///.perfgate/history.db)",
        {"metavar": "URL"},
        env="PERFGATE_DB_URL",
    ),
    Option("baselines", "folder of baseline files; default: the config's", {"metavar": "DIR"}),
    Option(
        "profile",
        "runner profile naming the baselines to use; default: $PERFGATE_PROFILE, else from the "
        "hardware (cpu, h200x8...)",
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
BY_NAME = {option.name: option for option in OPTIONS}
# What `perfgate run` and the pytest plugin take: every shared option.
GATE_OPTIONS = tuple(option.name for option in OPTIONS)
# What a command that reads or writes the history takes.
HISTORY_OPTIONS = ("config", "db")


def add_options(
    add: Callable[..., Any],
    names: Iterable[str] = GATE_OPTIONS,
    *,
    flag_prefix: str = "--",
    dest_prefix: str = "",
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Declare the options `names` through `add` (argparse's add_argument, pytest's addoption).

    `overrides` changes an option's keyword arguments for one command (`required`, or the
    `help` where its default differs).
    """
    for name in names:
        option = BY_NAME[name]
        kwargs = dict(option.kwargs)
        if option.choices is not None:
            kwargs["choices"] = tuple(option.choices())
        kwargs.update((overrides or {}).get(name, {}))
        text = kwargs.pop("help", option.help)
        add(flag_prefix + name, dest=dest_prefix + option.dest, help=text, **kwargs)


@dataclass(frozen=True)
class Settings(GateOptions):
    """The shared options of one command line (or pytest session), resolved once: the
    fields of GateOptions, with what they resolve to.

    The environment's defaults ($PERFGATE_DB_URL, $PERFGATE_PROFILE) are applied; the history
    URL and the config are resolved on first use, since not every command needs them.
    """

    @functools.cached_property
    def history_url(self) -> str:
        """--db, else $PERFGATE_DB_URL, else the config's history, else the default file here."""
        from perfgate.store.database import resolve_history_url

        return resolve_history_url(self.db, self.config)

    def baselines_dir(self, config_baselines: Path) -> Path:
        """--baselines if given, else the config's folder."""
        return Path(self.baselines) if self.baselines else config_baselines


def resolve_settings(
    get: Callable[[str], Any], environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from option values, `get("db")` giving the value of `db` (None if not declared).

    An option left unset takes its environment variable, if it has one.
    """
    env = os.environ if environ is None else environ

    def value(name: str) -> Any:
        option = BY_NAME[name]
        given = get(option.dest)
        return env.get(option.env) if given is None and option.env else given

    scenario = value("scenario")  # repeatable, or one for a command that takes one
    return Settings(
        config=value("config"),
        scenarios=(scenario,) if isinstance(scenario, str) else tuple(scenario or ()),
        engine=value("engine"),
        db=value("db"),
        baselines=value("baselines"),
        profile=value("profile"),
        report=value("report"),
        gate=not value("no-gate"),
        refresh_plain=bool(value("refresh-plain")),
        require_baseline=bool(value("require-baseline")),
    )


def settings_from(args: Any, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from a parsed command line; an option the command does not declare is unset."""
    return resolve_settings(lambda dest: getattr(args, dest, None), environ)
