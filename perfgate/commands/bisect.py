"""`perfgate bisect`: the first commit of a range whose runs the gate finds like the bad end's."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any

from perfgate.commands import add_command
from perfgate.config import check_history_name
from perfgate.errors import ConfigError
from perfgate.files import check_output_file, write_text_atomically
from perfgate.settings import Settings, add_options

DEFAULT_GOOD_RUNS = 3


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "bisect",
        description="Find the commit that made a scenario slower. Each commit measured is "
        "checked out in a temporary git worktree (your tree is untouched) and its servers run "
        "this environment's Python with the commit's --source folders first on the path. The "
        "good end is measured --good-runs times; the bad end and every commit after are judged "
        "against those runs by the gate (the scenario's tolerances, alpha and max_runs: "
        "another run while a verdict is inconclusive) as like good, like bad (a regression "
        "nearer the bad end than the good one), between the ends (a regression nearer the "
        "good end) or undecided, halving the range until one commit is named. Every run is "
        "recorded (as scenario NAME, default SCENARIO-bisect, tagged with the bisect); the "
        "same command resumes an interrupted bisect from them. Exit code: 0 a commit named; "
        "75 not told apart (the ends, or a commit between undecided or between the ends); 69 "
        "the commits left could not be measured, or a server failed at an end; 64 bad input; "
        "130/143 interrupted (SIGINT/SIGTERM).",
    )
    add = parser.add_argument
    add("--good", required=True, metavar="REV", help="a commit without the regression")
    add("--bad", required=True, metavar="REV", help="a later commit with it")
    add_options(add, ("config", "scenario"))
    add("--repo", metavar="DIR", help="the git checkout to bisect (default: the current one)")
    add(
        "--source",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of the repository put first on the servers' PYTHONPATH (repeatable; "
        "default: its top, where perfgate's own package is; SGLang's is python)",
    )
    add(
        "--good-runs",
        type=int,
        default=DEFAULT_GOOD_RUNS,
        metavar="N",
        help=f"runs of the good end to judge against (default {DEFAULT_GOOD_RUNS}, at least 2)",
    )
    add("--name", help="the scenario name its runs are recorded under (default SCENARIO-bisect)")
    add_options(add, ("engine", "db", "profile"))
    add("--json", metavar="PATH", help="also write the bisect as JSON here")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.bisect.git import (
        changed_dependency_files,
        commit_range,
        repository_root,
        resolve_commit,
    )
    from perfgate.bisect.render import outcome_lines
    from perfgate.bisect.run import BisectRunner, BisectSpec
    from perfgate.context import detect_context
    from perfgate.folders import process_folder
    from perfgate.progress import stderr_reporter
    from perfgate.selection import selection_from

    # Outputs and a history that cannot be written fail before anything is measured.
    out = None if args.json is None else check_output_file(args.json, "--json")
    chosen = selection_from(settings, writes=True, one="bisect measures one scenario")
    config, scenario, profile, url = (
        chosen.config,
        chosen.scenario,
        chosen.profile,
        chosen.history_url,
    )
    name = bisect_name(args.name, scenario.name, set(config.scenarios))
    if args.good_runs < 2:
        raise ConfigError(
            "must be >= 2: the gate judges nothing until it has seen how far launches land apart",
            field="--good-runs",
            fix="give 3 (the default) or more",
        )
    sources = source_folders(args.source)
    repo = repository_root(Path(args.repo) if args.repo else Path.cwd())
    good = resolve_commit(repo, args.good, "--good")
    bad = resolve_commit(repo, args.bad, "--bad")
    commits = tuple(commit_range(repo, good, bad))
    changed = changed_dependency_files(repo, good, bad)
    if changed:
        print(
            f"note: {', '.join(changed)} changed in the range: every commit runs with this "
            "environment's installed dependencies"
        )
    spec = BisectSpec(
        scenario=scenario,
        name=name,
        repo=repo,
        commits=commits,
        sources=sources,
        good_runs=args.good_runs,
    )
    runner = BisectRunner(
        spec=spec,
        profile=profile,
        history_url=url,
        workdir=process_folder(config.path.parent) / f"bisect-{spec.id}",
        context=detect_context(config.path.parent, clean_paths=[config.baselines_dir]),
        alpha=config.alpha,
        config_file=config.path,
        progress=stderr_reporter(),  # stdout carries the steps
        say=lambda line: print(line, flush=True),
    )
    with sigterm_as_exit():
        result = runner.run()
    again = f"perfgate bisect --scenario {shlex.quote(scenario.name)} --good {good[:12]} "
    again += f"--bad {bad[:12]}"
    for line in outcome_lines(result, again):
        print(line)
    if out is not None:
        write_text_atomically(out, json.dumps(result.to_json(), indent=2) + "\n")
    return int(result.exit_code())


def bisect_name(given: str | None, scenario: str, scenarios: set[str]) -> str:
    """The scenario name a bisect's runs are recorded under; never a configured scenario's."""
    name = given or f"{scenario}-bisect"
    check_history_name(name, field="--name")
    if name in scenarios:
        raise ConfigError(
            f"{name!r} is a scenario of the config: the bisect's runs would mix with its runs",
            field="--name",
            fix="give the bisect another name",
        )
    return name


def source_folders(given: list[str]) -> tuple[str, ...]:
    """The --source folders, each inside the repository (relative, no '..')."""
    folders = given or ["."]
    for folder in folders:
        path = PurePosixPath(folder)
        if path.is_absolute() or ".." in path.parts or not folder:
            raise ConfigError(
                f"{folder!r} is not a folder inside the repository",
                field="--source",
                fix="give it relative to the repository's top, e.g. --source python",
            )
    return tuple(folders)


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM ends the command as Ctrl-C does, unwinding: the servers stop and the
    worktrees are removed (exit 143)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
