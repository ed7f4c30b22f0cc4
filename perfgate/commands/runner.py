"""`perfgate runner job-started | job-completed`: the self-hosted runner's job hooks.

runner/hooks/job-started.sh and job-completed.sh call these; see docs/runner-setup.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

from perfgate.commands import add_command
from perfgate.errors import ConfigError
from perfgate.files import check_output_file
from perfgate.runner.gpu_health import DEFAULT_MAX_MEMORY_MIB, DEFAULT_MAX_UTILIZATION, Limits
from perfgate.settings import Settings

EPILOG = """exit codes:
  0   the machine is clean, idle and healthy (job-completed: always, problems are warnings)
  64  --state-file cannot be written (nothing is ended or checked then)
  69  a GPU is busy or unhealthy, fewer GPUs than expected, or a leftover could not be ended
"""


def register(commands: Any) -> None:
    parser = add_command(commands, "runner")
    hooks = parser.add_subparsers(dest="hook", metavar="HOOK", required=True)
    started = hooks.add_parser(
        "job-started",
        help="end leftover servers, check every GPU is idle and healthy, save its settings",
        description="Before a job: end the inference servers earlier jobs of this runner "
        "(RUNNER_NAME) left, wait for the GPUs to be idle, refuse busy or unhealthy ones (clock "
        "slowdowns, uncorrected ECC errors, pending row remaps or page retirements), and save "
        "the GPUs' settings for the run's fingerprint (PERFGATE_MACHINE_STATE, exported through "
        "GITHUB_ENV).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _started_args(started)
    _common(started)
    started.set_defaults(handler=handle_started)
    completed = hooks.add_parser(
        "job-completed", help="end the servers the job left behind (never fails the job)"
    )
    _common(completed)
    completed.set_defaults(handler=handle_completed)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def _started_args(started: argparse.ArgumentParser) -> None:
    started.add_argument(
        "--max-memory-mib",
        type=float,
        default=DEFAULT_MAX_MEMORY_MIB,
        metavar="MIB",
        help=f"memory an idle GPU may show in use (default {DEFAULT_MAX_MEMORY_MIB:g})",
    )
    started.add_argument(
        "--max-utilization",
        type=float,
        default=DEFAULT_MAX_UTILIZATION,
        metavar="PCT",
        help=f"utilisation an idle GPU may show (default {DEFAULT_MAX_UTILIZATION:g}%%)",
    )
    started.add_argument("--wait-s", type=float, default=60.0, help="for GPU memory to be released")
    started.add_argument(
        "--expect-gpus",
        type=int,
        default=None,
        metavar="N",
        help="fail when fewer GPUs are visible (default: $PERFGATE_EXPECT_GPUS)",
    )
    started.add_argument(
        "--state-file", metavar="PATH", help="default: $RUNNER_TEMP/perfgate-machine-state.json"
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grace-s", type=float, default=10.0, help="between SIGTERM and SIGKILL")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


EXPECT_GPUS_VARIABLE = "PERFGATE_EXPECT_GPUS"


def _expected_gpus(given: int | None) -> int | None:
    """--expect-gpus, else $PERFGATE_EXPECT_GPUS (its one reader); a count from 1, or none."""
    field, value = "--expect-gpus", given
    if given is None:
        text = os.environ.get(EXPECT_GPUS_VARIABLE, "").strip()
        if not text:
            return None
        field, value = EXPECT_GPUS_VARIABLE, int(text) if text.isdigit() else None
    if value is None or value < 1:
        shown = given if given is not None else os.environ.get(EXPECT_GPUS_VARIABLE)
        raise ConfigError(
            f"is {shown!r}, not a count of GPUs from 1",
            field=field,
            fix="give the GPUs this runner has, e.g. 8, or leave it unset",
        )
    return value


def _check_seconds_and_limits(args: argparse.Namespace) -> None:
    """The hooks' numbers: finite and not below zero; the utilisation a percentage."""
    for flag in ("--grace-s", "--wait-s", "--max-memory-mib", "--max-utilization"):
        value = getattr(args, flag[2:].replace("-", "_"), None)
        high = 100.0 if flag == "--max-utilization" else math.inf
        if value is not None and not (0 <= value <= high and math.isfinite(value)):
            raise ConfigError(
                f"is {value}, not a finite number from 0" + (" to 100" if high == 100 else ""),
                field=flag,
                fix="give a number such as its default (see --help)",
            )


def _print(result: Any, hook: str, as_json: bool) -> int:
    from perfgate.runner.hooks import render_result

    if as_json:
        document = {
            "exit_code": int(result.exit_code),
            "ended": [left.describe() for left in result.ended],
            "problems": result.problems,
            "notes": result.notes,
            "gpus": result.report.to_dict() if result.report else None,
            "state_file": str(result.state_file) if result.state_file else None,
        }
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        for line in render_result(result, hook):
            print(line, flush=True)
    return int(result.exit_code)


def handle_started(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.runner.hooks import HookOptions, job_started

    _check_seconds_and_limits(args)
    given = args.state_file  # checked before any leftover is ended
    state_file = None if given is None else check_output_file(given, "--state-file")
    options = HookOptions(
        limits=Limits(args.max_memory_mib, args.max_utilization),
        wait_s=args.wait_s,
        grace_s=args.grace_s,
        expect_gpus=_expected_gpus(args.expect_gpus),
        state_file=state_file,
    )
    return _print(job_started(options), "job-started", args.json)


def handle_completed(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.runner.hooks import HookOptions, job_completed

    _check_seconds_and_limits(args)
    return _print(job_completed(HookOptions(grace_s=args.grace_s)), "job-completed", args.json)
