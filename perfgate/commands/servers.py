"""`perfgate servers`: the server command lines a run would launch, or one server to poke at."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from perfgate.commands import add_command
from perfgate.config import Scenario
from perfgate.engines.server_commands import MODES, Mode
from perfgate.errors import ConfigError
from perfgate.folders import new_folder, process_folder_name
from perfgate.preflight import check_scenario, preflight, refuse_embedded_only
from perfgate.progress import stderr_reporter
from perfgate.selection import selection_from
from perfgate.settings import Settings, add_options
from perfgate.sglang import facts as sglang_facts

SERVERS = Path(".perfgate") / "servers"


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "servers",
        description="With --dry-run, print the exact command lines a run would launch, one per "
        "line, shell-quoted, with their environment: the plain twin, then the speculative server "
        "(notes on what was not checked go to stderr). Without it, check the machine, start one "
        "server (--mode) as a run would and keep it up until Ctrl-C; its log and probe files "
        "go to a folder of its own, .perfgate/servers/<time>-<pid>/<scenario>.",
    )
    add_options(parser.add_argument, ("config", "scenario", "engine"))
    parser.add_argument("--dry-run", action="store_true", help="print, do not launch")
    parser.add_argument("--mode", choices=MODES, default="spec", help="server to start")


def run(settings: Settings, args: argparse.Namespace) -> int:
    chosen = selection_from(settings, writes=False)  # nothing is recorded
    config, scenarios = chosen.config, chosen.scenarios
    # A folder of its own per invocation, as a session's: two at once never share a log.
    servers = config.path.parent / SERVERS
    if args.dry_run:  # named as a launch would name it, not made
        for scenario in scenarios:
            _print_commands(scenario, config.path, servers / process_folder_name())
        return 0
    folder = new_folder(servers, process_folder_name())
    return _serve(scenarios[0], args.mode, config.path, folder)


def _print_commands(scenario: Scenario, file: Path, probe_root: Path) -> None:
    from perfgate.engines.launch import probed_command

    refuse_embedded_only(scenario, file)  # before any note on the installed release
    release = _installed_or_pinned(scenario) if scenario.engine == "sglang" else None
    for note in check_scenario(scenario, file, release):
        print(f"# {note}", file=sys.stderr)
    for mode in MODES:
        command = probed_command(
            scenario, mode, probe_root / scenario.name / f"probe-{mode}", release
        )
        print(command.shell())


def _installed_or_pinned(scenario: Scenario) -> sglang_facts.SglangRelease:
    # A dry run also serves on a laptop without SGLang: say which release the flags are for.
    python = scenario.python or sys.executable
    try:
        installed = sglang_facts.installed_versions(python, {**os.environ, **scenario.env})
        return sglang_facts.require_sglang(installed, f"scenarios.{scenario.name}.python")
    except ConfigError as error:
        print(
            f"# {scenario.name}: {error}; printing the command lines of SGLang "
            f"{sglang_facts.PINNED}",
            file=sys.stderr,
        )
        return sglang_facts.release(sglang_facts.PINNED)


def _serve(scenario: Scenario, mode: Mode, file: Path, probe_root: Path) -> int:
    from perfgate.engines.launch import probed_command, running_server

    checked = preflight(scenario, file)
    for note in checked.notes:
        print(f"# {note}", file=sys.stderr)
    command = probed_command(
        scenario, mode, probe_root / scenario.name / f"probe-{mode}", checked.sglang
    )
    log = probe_root / scenario.name / f"server-{mode}.log"
    with running_server(
        command,
        log,
        scenario.startup_timeout_s,
        gpus=checked.gpus,
        release_timeout_s=scenario.gpu_release_timeout_s,
        progress=stderr_reporter(),
    ) as server:
        print(f"{scenario.name} ({mode}) is up at {server.base_url}; log: {log}; Ctrl-C stops it")
        while server.exit_code() is None:
            time.sleep(0.5)
    return 0
