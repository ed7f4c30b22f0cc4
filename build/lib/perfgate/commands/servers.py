"""`perfgate servers`: the server command lines a run would launch, or one server to poke at."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from perfgate.config import ENGINES, load_config
from perfgate.engines.commands import MODES, server_command
from perfgate.engines.launch import free_port, running_server
from perfgate.probe import probe_env


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "servers",
        help="print the server command lines of a run (--dry-run), or start one server",
        description="With --dry-run, print the exact command lines a run would launch, one per "
        "line, shell-quoted, with their environment: the plain twin, then the speculative server. "
        "Without it, start one server (--mode) as a run would and keep it up until Ctrl-C.",
    )
    parser.add_argument("--config", metavar="PATH", help="perfgate.toml to read")
    parser.add_argument("--scenario", action="append", default=[], metavar="NAME")
    parser.add_argument("--engine", choices=ENGINES, help="override the scenario's engine")
    parser.add_argument("--dry-run", action="store_true", help="print, do not launch")
    parser.add_argument("--mode", choices=MODES, default="spec", help="server to start")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, _rest: list[str]) -> int:
    config = load_config(args.config)
    scenarios = config.select(args.scenario)
    if args.engine:
        scenarios = [s.with_engine(args.engine) for s in scenarios]
    probe_root = config.path.parent / ".perfgate" / "servers"
    if args.dry_run:
        for scenario in scenarios:
            for mode in MODES:
                env = probe_env(probe_root / scenario.name / f"probe-{mode}", scenario.engine)
                print(server_command(scenario, mode, port=free_port(), extra_env=env).shell())
        return 0
    scenario = scenarios[0]
    env = probe_env(probe_root / scenario.name / f"probe-{args.mode}", scenario.engine)
    command = server_command(scenario, args.mode, port=free_port(), extra_env=env)
    log = Path(probe_root / scenario.name / f"server-{args.mode}.log")
    with running_server(command, log, scenario.startup_timeout_s) as server:
        print(
            f"{scenario.name} ({args.mode}) is up at {server.base_url}; log: {log}; Ctrl-C stops it"
        )
        while server.process.poll() is None:
            time.sleep(0.5)
    return 0
