"""`perfgate doctor`: check that this machine can run the gate, before anything is launched."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from perfgate.commands import add_command
from perfgate.settings import Settings, add_options

EPILOG = """exit codes:
  0   every check ok (warnings allowed)
  64  something to fix: the config, a baseline file, the engine's install, a history that
      cannot be written, or (CI=true, --require-baseline) no matching reviewed baseline
  69  the machine: no, busy or unhealthy GPUs for a GPU scenario, no free port, the history's
      server unreachable
"""


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "doctor",
        description="Check that this machine can run the gate on the selected scenarios: "
        "GPUs (idle and healthy), driver, CUDA, torch, the engines' installs, free ports, that "
        "the history takes writes (a write transaction, rolled back), and what each run will "
        "be judged against: the reviewed baseline, with every fingerprint field that differs "
        "on this machine, or this machine's own history. Every failure names its fix. Starts "
        "no server, writes nothing that persists.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(
        parser.add_argument,
        ("config", "scenario", "engine", "db", "baselines", "profile"),
    )
    parser.add_argument(
        "--no-gate", action="store_true", help="baselines are not needed (a first run)"
    )
    add_options(parser.add_argument, ("require-baseline",))
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.runner.doctor import doctor_exit_code, run_checks

    # An empty --db or --profile means unset, as it does in the other commands.
    options = replace(settings, db=settings.db or None, profile=settings.profile or None)
    checks = run_checks(options)
    code = int(doctor_exit_code(checks))
    if args.json:
        document = {"exit_code": code, "ok": code == 0, "checks": [c.to_dict() for c in checks]}
        print(json.dumps(document, indent=2, sort_keys=True))
        return code
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"  {check.status.upper():<5} {check.name:<{width}}  {check.detail}")
        if check.fix and check.status != "ok":
            print(f"  {'':<5} {'':<{width}}  fix: {check.fix}")
    failed = sum(c.status == "fail" for c in checks)
    print(f"perfgate doctor: {failed} problem(s), exit {code}" if failed else "perfgate doctor: ok")
    return code
