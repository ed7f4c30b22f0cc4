"""`perfgate`: the command line. Each command lives in perfgate/commands/<name>.py."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

from perfgate.commands import COMMANDS
from perfgate.errors import ExitCode, PerfgateError
from perfgate.fingerprint import perfgate_version

EPILOG = """exit codes:
  0   pass            every verdict pass or improvement, outputs equivalent
  1   regression      a gated metric regressed, or outputs are not equivalent
  64  bad input       a config, baseline, flag or run id is wrong
  69  infrastructure  a server did not start, a device is busy
  75  inconclusive    too noisy to decide; run again
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # A bad flag is bad input: perfgate's documented code, not argparse's 2.
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.BAD_INPUT), f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perfgate",
        description="A CI performance gate for speculative decoding.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"perfgate {perfgate_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.handler(args, rest))
    except PerfgateError as error:
        print(f"perfgate: error: {error}", file=sys.stderr)
        if error.detail:
            print(textwrap.indent(error.detail, "  | "), file=sys.stderr)
        return int(error.exit_code)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
