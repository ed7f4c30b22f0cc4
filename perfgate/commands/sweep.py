"""`perfgate sweep`: a grid of speculative settings and environments, each point a recorded run."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.commands import add_command
from perfgate.config import Config, Scenario, check_history_name
from perfgate.context import detect_context, github_run
from perfgate.errors import ConfigError
from perfgate.files import check_output_file, write_text_atomically
from perfgate.folders import process_folder, stamp
from perfgate.progress import stderr_reporter
from perfgate.selection import selection_from
from perfgate.settings import Settings, add_options
from perfgate.sweep.collected import render_collected
from perfgate.sweep.grid import SweepSpec, parse_env_flag, parse_int_list
from perfgate.sweep.render import render_markdown, sweep_json
from perfgate.sweep.shards import Shard, batches, collect, parse_shard

BATCH = re.compile(r"[A-Za-z0-9._-]{1,100}")


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "sweep",
        description="Measure a scenario over a grid of speculative settings (--steps, --topk, "
        "--draft-tokens) under every combination of environment values (--env), or a "
        "[sweeps.NAME] table of the config (--sweep; flags override its fields). The plain twin "
        "is measured once per environment point; every speculative point is a run recorded in "
        "the history (under the sweep's name, no baseline judged) with its outputs checked "
        "against the plain twin's. A branch (steps ascending at one topk and environment) stops "
        "once two points in a row are clearly worse than its best (the gate's statistics; "
        "--no-early-stop measures everything). Prints the table and the best configuration. "
        "Exit code: 0; 1 if a point's outputs were not equivalent; 69 if a server failed; 75 "
        "if the budget ran out before any point was measured. --shard I/N measures every "
        "N-th point (a runner's share of a fleet's sweep, recorded under --batch); --collect "
        "NAME measures nothing and gathers a batch's points from the history: the table, the "
        "best among points whose fingerprints agree, the points no shard recorded (exit 69 "
        "when some are missing, 64 when the points' machines differ).",
    )
    add = parser.add_argument
    add_options(add, ("config",))
    add("--sweep", metavar="NAME", help="a [sweeps.NAME] table of the config")
    add("--scenario", metavar="NAME", help="the scenario to vary (default: the first default one)")
    add(
        "--name",
        help="the sweep's name, its runs' scenario in the history (default SCENARIO-sweep)",
    )
    add("--steps", help="draft steps: a range or list, e.g. 1-10 or 1,2,4")
    add("--topk", help="topk values, e.g. 1,2 (default 1: chains)")
    add("--draft-tokens", help="draft tokens of trees (topk > 1), e.g. 4,8")
    add("--env", action="append", default=[], metavar="NAME=V1,V2", help="an environment axis")
    add("--repeats", type=int, help="repeats per server (default: the scenario's)")
    add("--no-early-stop", action="store_true", help="measure every point of every branch")
    add("--budget-s", type=float, help="launch no server after this many seconds")
    add_plain_reuse(add)
    add_options(add, ("engine", "db", "profile"))
    add(
        "--shard",
        metavar="I/N",
        help="measure only shard I of N: the points numbered k (in the grid's order, from 0) "
        "with k %% N == I-1; early stop is off (no shard sees a whole branch)",
    )
    add(
        "--batch",
        metavar="ID",
        help="the batch its points are recorded in, the same for every shard (default: "
        "github-$GITHUB_RUN_ID in GitHub Actions; required otherwise with --shard); with "
        "--collect, the batch to gather (default: the newest)",
    )
    add(
        "--collect",
        metavar="NAME",
        help="measure nothing: gather sweep NAME's batch from the history, name its best point",
    )
    add("--json", metavar="PATH", help="also write the sweep as JSON here")
    add("--markdown", metavar="PATH", help="also write the table here")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.sweep.run import SweepRunner

    check_outputs(args)
    if args.collect:
        return collect_sweep(settings, args)
    specs: list[SweepSpec] = []

    def sweep_scenario(config: Config) -> list[str]:
        specs.append(sweep_spec(args, config))
        return [specs[0].scenario]

    # A history that refuses writes fails before anything is measured.
    chosen = selection_from(settings, writes=True, names=sweep_scenario)
    config, spec = chosen.config, specs[0]
    base = with_plain_reuse(chosen.scenario, args)
    shard = parse_shard(args.shard) if args.shard else Shard()
    batch = batch_id(args.batch, shard, github_run().run_id)
    early_stop = spec.early_stop and not args.no_early_stop
    if shard.count > 1 and early_stop:
        print(
            f"note: shard {shard}: early stop is off (a branch's points are spread over the "
            "shards, none of which sees the whole branch)",
            file=sys.stderr,
        )
        early_stop = False
    if args.budget_s is not None and not 0 < args.budget_s < math.inf:
        raise ConfigError(
            f"must be a finite number > 0, not {args.budget_s}",
            field="--budget-s",
            fix="give seconds, e.g. 450",
        )
    profile, url = chosen.profile, chosen.history_url
    runner = SweepRunner(
        spec=spec,
        base=base,
        profile=profile,
        history_url=url,
        workdir=process_folder(config.path.parent) / f"sweep-{spec.name}",
        context=detect_context(config.path.parent, clean_paths=[config.baselines_dir]),
        config_file=config.path,
        early_stop=early_stop,
        budget_s=args.budget_s,
        progress=stderr_reporter(),  # stdout carries the table
        shard=shard,
        batch=batch,
        refresh_plain=args.refresh_plain,
    )
    result = runner.run()
    markdown = render_markdown(result)
    if shard.count > 1:
        markdown += f"\nShard {shard} of batch {batch}: `perfgate sweep --collect {spec.name} "
        markdown += f"--batch {batch}` gathers every shard's points.\n"
    print(markdown)
    write_outputs(args, markdown, {**sweep_json(result), "batch": batch, "shard": str(shard)})
    return int(result.exit_code())


def add_plain_reuse(add: Any) -> None:
    """The flags of a sweep's or a plan's plain twin: reused from the history, or measured."""
    add(
        "--plain-max-age-h",
        type=float,
        metavar="H",
        help="reuse the plain twin's figures from a recorded run with the same plain "
        "fingerprint younger than H hours, on any branch (default: the scenario's "
        "plain_max_age_h; none: measure it)",
    )
    add(
        "--refresh-plain",
        action="store_true",
        help="measure the plain twin even where the history has reusable figures for it",
    )


def with_plain_reuse(base: Scenario, args: argparse.Namespace) -> Scenario:
    """`base` with --plain-max-age-h as its plain_max_age_h, where given."""
    hours = args.plain_max_age_h
    if hours is None:
        return base
    if not 0 < hours < math.inf:
        raise ConfigError(
            f"must be a finite number > 0, not {hours}",
            field="--plain-max-age-h",
            fix="give hours, e.g. 24, or leave it out",
        )
    return replace(base, plain_max_age_h=hours)


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse a --markdown or --json path that cannot be written, before anything is measured."""
    for flag, given in (("--markdown", args.markdown), ("--json", args.json)):
        if given is not None:
            check_output_file(given, flag)


def write_outputs(args: argparse.Namespace, markdown: str, document: dict[str, Any]) -> None:
    """--markdown and --json, each written whole or not at all."""
    if args.markdown is not None:
        write_text_atomically(Path(args.markdown), markdown)
    if args.json is not None:
        write_text_atomically(Path(args.json), json.dumps(document, indent=2) + "\n")


def batch_id(given: str | None, shard: Shard, run_id: str = "") -> str:
    """The batch a sweep's points are recorded in: --batch, GitHub Actions' run, or (one
    shard only) a new one of its own."""
    if given is not None:
        if not BATCH.fullmatch(given):
            raise ConfigError(
                f"{given!r} is not a batch id",
                field="--batch",
                fix="use up to 100 letters, digits and . _ - (e.g. steps-20261130)",
            )
        return given
    if run_id:  # GitHub Actions' run: every shard of one workflow run shares it
        return f"github-{run_id}"
    if shard.count > 1:
        raise ConfigError(
            "the shards of a sweep must share a batch",
            field="--batch",
            fix="give every shard the same --batch ID (GitHub Actions' run id is the default "
            "there)",
        )
    return f"{stamp()}-{os.getpid()}"


def collect_sweep(settings: Settings, args: argparse.Namespace) -> int:
    """`--collect NAME`: gather a batch's points from the history; measure nothing."""
    from perfgate.store import RunFilter, history, list_runs

    name = args.collect
    where = RunFilter(scenario=name, profile=settings.profile)
    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        found = batches(list_runs(session, where=where))
    if not found:
        raise ConfigError(
            f"the history holds no batch of sweep {name!r}"
            + (f" on runner profile {settings.profile!r}" if settings.profile else ""),
            field="--collect",
            fix="name a sweep whose points were recorded with --shard or --batch "
            "(`perfgate history list` shows the runs' scenarios)",
        )
    batch = args.batch or max(found, key=lambda b: max(r.id or 0 for r in found[b]))
    if batch not in found:
        raise ConfigError(
            f"sweep {name!r} has no batch {batch!r}",
            field="--batch",
            fix=f"choose one of: {', '.join(found)}",
        )
    collected = collect(name, batch, found[batch])
    markdown, document, code = render_collected(collected)
    print(markdown)
    write_outputs(args, markdown, document)
    return int(code)


def sweep_spec(args: argparse.Namespace, config: Config) -> SweepSpec:
    """The sweep the flags ask for: a config table with the flags over it, or the flags alone."""
    if args.sweep:
        if args.sweep not in config.sweeps:
            known = ", ".join(sorted(config.sweeps)) or "none is defined ([sweeps.NAME])"
            raise ConfigError(
                f"unknown sweep {args.sweep!r}",
                file=config.path,
                field="--sweep",
                fix=f"choose one of: {known}",
            )
        spec = config.sweeps[args.sweep]
        if args.scenario and args.scenario != spec.scenario:
            raise ConfigError(
                f"sweep {spec.name!r} varies scenario {spec.scenario!r}, not {args.scenario!r}",
                field="--scenario",
                fix="drop --scenario, or leave out --sweep",
            )
    elif not args.steps:
        raise ConfigError(
            "nothing to sweep", field="--steps", fix="pass --steps (e.g. 1-10) or --sweep NAME"
        )
    else:
        scenario = args.scenario or config.default_scenarios[0]
        spec = SweepSpec(name=f"{scenario}-sweep", scenario=scenario, steps=())
    spec = _with_flags(spec, args)
    check_history_name(spec.name, field="the sweep's name, its runs' scenario (--name)")
    if spec.name in config.scenarios:
        raise ConfigError(
            f"the sweep's name {spec.name!r} is a scenario's: its runs would mix with the gate's",
            field="--name",
            fix="give the sweep another name",
        )
    return spec


def _with_flags(spec: SweepSpec, args: argparse.Namespace) -> SweepSpec:
    changes: dict[str, Any] = {}
    if args.name:
        changes["name"] = args.name
    for flag in ("steps", "topk", "draft_tokens"):
        text = getattr(args, flag)
        if text:
            changes[flag] = parse_int_list(text, "--" + flag.replace("_", "-"))
    if args.env:
        changes["env"] = dict(parse_env_flag(text) for text in args.env)
    if args.repeats is not None:
        if args.repeats < 1:
            raise ConfigError("must be >= 1", field="--repeats", fix="time at least one repeat")
        changes["repeats"] = args.repeats
    return replace(spec, **changes)
