"""`perfgate`: the command line. Each command lives in perfgate/commands/<name>.py.

Only the chosen command's module is imported (the table in perfgate.commands lists them all),
so `perfgate --help` and `perfgate CMD --help` start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from perfgate.commands import BY_NAME, COMMANDS
from perfgate.errors import ExitCode, InternalError, PerfgateError
from perfgate.settings import settings_from

EPILOG = """exit codes:
  0   pass            every verdict pass or improvement, outputs equivalent
  1   regression      a gated metric regressed, or outputs are not equivalent
  64  bad input       a config, baseline, flag or run id is wrong
  69  infrastructure  a server did not start, a device is busy
  75  inconclusive    too noisy to decide; run again
  70  internal error  perfgate failed unexpectedly (a bug: report it with the traceback)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # A bad flag is bad input: perfgate's documented code, not argparse's 2.
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """--version, reading the installed version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show perfgate's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from perfgate.version import perfgate_version

        print(f"perfgate {perfgate_version()}")
        parser.exit()


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is not a flag), if it is one."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in BY_NAME else None


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser: every command listed; the flags of `command` (of each with `every`).

    Only the modules of the commands whose flags are declared are imported.
    """
    parser = _Parser(
        prog="perfgate",
        description="A CI performance gate for speculative decoding.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", parser_class=_Parser
    )
    commands.required = True
    for entry in COMMANDS:
        if every or entry.name == command:
            importlib.import_module(entry.module).register(commands)
        else:
            commands.add_parser(entry.name, help=entry.help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    chosen = chosen_command(words)
    parser = build_parser(chosen)
    args, rest = parser.parse_known_args(words)
    if rest and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.extra = rest
    try:
        module = importlib.import_module(BY_NAME[args.command].module)
        return int(module.run(settings_from(args), args))
    except PerfgateError as error:
        print(f"perfgate: error: {error}", file=sys.stderr)
        if error.detail:
            print(textwrap.indent(error.detail, "  | "), file=sys.stderr)
        return int(error.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a bug: its own code, so that no CI reads it as a regression
        traceback.print_exc()
        bug = InternalError(f"`perfgate {args.command}`", error)
        print(f"perfgate: internal error: {bug}", file=sys.stderr)
        return int(bug.exit_code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
