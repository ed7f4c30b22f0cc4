"""`perfgate doctor`: check that this machine can run the gate, before anything is launched."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from perfgate.config import ENGINES
from perfgate.runner.doctor import DoctorOptions, doctor_exit_code, run_checks

EPILOG = """exit codes:
  0   every check ok (warnings allowed)
  64  something to fix: the config, a baseline file, the engine's install, a history that
      cannot be written, or (CI=true, --require-baseline) no matching reviewed baseline
  69  the machine: no, busy or unhealthy GPUs for a GPU scenario, no free port, the history's
      server unreachable
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check GPUs, driver, CUDA, torch, engines, ports, history and baselines",
        description="Check that this machine can run the gate on the selected scenarios: "
        "GPUs (idle and healthy), driver, CUDA, torch, the engines' installs, free ports, that "
        "the history takes writes (a write transaction, rolled back), and what each run will "
        "be judged against: the reviewed baseline, with every fingerprint field that differs "
        "on this machine, or this machine's own history. Every failure names its fix. Starts "
        "no server, writes nothing that persists.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="PATH")
    parser.add_argument("--scenario", action="append", default=[], metavar="NAME")
    parser.add_argument("--engine", choices=ENGINES)
    parser.add_argument("--db", metavar="URL", help="history URL (default: the config's)")
    parser.add_argument("--baselines", metavar="DIR")
    parser.add_argument("--profile", metavar="NAME")
    parser.add_argument("--no-gate", action="store_true", help="baselines are not needed")
    parser.add_argument(
        "--require-baseline",
        action="store_true",
        help="as `perfgate run --require-baseline` (the default where CI=true): a missing or "
        "non-matching reviewed baseline fails",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, _rest: list[str]) -> int:
    options = DoctorOptions(
        config=args.config,
        scenarios=tuple(args.scenario),
        engine=args.engine,
        db=args.db or os.environ.get("PERFGATE_DB_URL") or None,
        baselines=args.baselines,
        profile=args.profile or os.environ.get("PERFGATE_PROFILE") or None,
        gate=not args.no_gate,
        require_baseline=args.require_baseline,
    )
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
