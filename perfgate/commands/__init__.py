"""The CLI's commands, listed here without importing them.

Each module (perfgate/commands/<name>.py) has `register(subparsers)`, which declares its
flags, and `run(settings, args) -> int`. `perfgate --help` lists the table below; a command's
module is imported only when that command is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    name: str
    help: str  # the one line `perfgate --help` shows

    @property
    def module(self) -> str:
        """The module that declares and runs it: perfgate/commands/<name>.py."""
        return f"perfgate.commands.{self.name}"


COMMANDS: tuple[Command, ...] = (
    Command("run", "measure, judge, record and report the scenarios (runs the gate suites)"),
    Command("servers", "print the server command lines of a run (--dry-run), or start one server"),
    Command("sweep", "measure a grid of steps/topk/draft tokens and environments; print the best"),
    Command("bisect", "find the commit that made a scenario slower, judged by the gate"),
    Command("plan", "predict the best draft steps from one profiled run; confirm the best"),
    Command(
        "profile", "profile a few decode cycles with torch.profiler: work per phase and category"
    ),
    Command("gate", "judge recorded runs again against a baseline (records nothing)"),
    Command("baseline", "update, show or migrate approved baselines"),
    Command("report", "write the HTML trend report from the history"),
    Command("history", "list, show or export recorded runs"),
    Command("db", "upgrade the history database or show its schema"),
    Command("doctor", "check GPUs, driver, CUDA, torch, engines, ports, history and baselines"),
    Command("ci", "job summary, annotations and baseline approval for CI"),
    Command("runner", "job hooks for a self-hosted GPU runner"),
    Command("embedded", "the embedded engine's tools (train, export to SGLang's layout)"),
)
BY_NAME = {command.name: command for command in COMMANDS}


def add_command(commands: Any, name: str, **kwargs: Any) -> Any:
    """The parser of command `name`, its one-line help taken from the table."""
    return commands.add_parser(name, help=BY_NAME[name].help, **kwargs)
