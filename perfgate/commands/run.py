"""`perfgate run`: the gate suites, as `pytest perfgate/suites` runs them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfgate.commands import add_command
from perfgate.errors import ConfigError, ExitCode
from perfgate.settings import Settings, add_options

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
    import pytest

    from perfgate.pipeline import GatePlan
    from perfgate.plugin import HandedPlan

    # Built and checked once, before pytest starts (bad config or baselines are refused
    # here), then handed to the session pytest runs: nothing is read twice. pytest runs in
    # this process, so a signal to `perfgate run` reaches the run itself (a child would
    # outlive a SIGTERM or SIGKILL sent to this process alone, and record its run after the
    # caller saw it end). The suites are named as a package: pytest collects the copy of
    # perfgate that runs this command, never a copy in the current folder.
    plan = GatePlan(settings)
    code = pytest.main(["--pyargs", SUITES_PACKAGE, *pytest_args[1:]], [HandedPlan(plan)])
    return int(PYTEST_CODES.get(code, code))


# pytest's own exit codes that have a perfgate meaning (docs/gate.md#exit-codes): its flags
# after `--` wrong, or a selection of no test, is bad input; its internal error, a bug.
PYTEST_CODES = {
    4: ExitCode.BAD_INPUT,  # pytest.ExitCode.USAGE_ERROR
    5: ExitCode.BAD_INPUT,  # pytest.ExitCode.NO_TESTS_COLLECTED
    3: ExitCode.INTERNAL,  # pytest.ExitCode.INTERNAL_ERROR
}
