"""`perfgate run`: the gate suites, as `pytest perfgate/suites` runs them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from perfgate.commands import add_command
from perfgate.errors import ConfigError, InfrastructureError
from perfgate.settings import Settings, add_options, option_flags

SUITES = Path(__file__).resolve().parent.parent / "suites"
SUITES_PACKAGE = "perfgate.suites"


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "run",
        description="Run the gate suites (perfgate/suites) under pytest. Arguments after `--` "
        "go to pytest, e.g. `perfgate run -- --benchmark-json out.json`.",
    )
    add_options(parser.add_argument)
    parser.set_defaults(accepts_extra=True)


def run(settings: Settings, args: argparse.Namespace) -> int:
    pytest_args: list[str] = args.extra
    if pytest_args and pytest_args[0] != "--":
        raise ConfigError(
            f"unknown flag {pytest_args[0]!r}",
            field=pytest_args[0],
            fix="see `perfgate run --help`; pytest's own flags go after `--`",
        )
    from perfgate.pipeline import GatePlan

    GatePlan(settings)  # refuse bad config or baselines before pytest starts
    extra = pytest_args[1:]
    # A fresh interpreter, as `pytest perfgate/suites` would be: pytest must import (and
    # assertion-rewrite) the suites itself. Its exit code is the gate's. -P: the current
    # folder is not put on sys.path, so a copy of perfgate there never shadows this one; the
    # suites are named as a package, so pytest collects the copy it imports, whichever copy
    # ran this command.
    command = [sys.executable, "-P", "-m", "pytest", "--pyargs", SUITES_PACKAGE]
    command += [*option_flags(settings), *extra]
    exec_pytest(command)


def exec_pytest(command: list[str]) -> NoReturn:
    """Become pytest (same process): a signal to `perfgate run` then reaches the run itself.

    A child would outlive a SIGTERM or SIGKILL sent to this process alone and go on to record
    its run after the caller saw it end.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(command[0], command)
    except OSError as error:
        raise InfrastructureError(f"cannot start {command[0]}: {error.strerror}") from None
