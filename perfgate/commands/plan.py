"""`perfgate plan`: predict a chain's best step count from one profiled run, then confirm it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from perfgate.commands import add_command
from perfgate.commands.sweep import (
    add_plain_reuse,
    check_outputs,
    with_plain_reuse,
    write_outputs,
)
from perfgate.config import Config, Scenario, check_history_name
from perfgate.context import detect_context
from perfgate.errors import ConfigError
from perfgate.folders import process_folder
from perfgate.plan import DEFAULT_CONFIRM, DEFAULT_STEPS
from perfgate.progress import stderr_reporter
from perfgate.selection import selection_from
from perfgate.settings import Settings, add_options
from perfgate.sweep.grid import parse_env_flag


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "plan",
        description="Launch the speculative server once at a generous chain step count "
        "(--steps, topk 1) with the probe, which records what each sequence accepted in each "
        "cycle and what each phase cost, and predict every shorter chain from it: accept "
        "length, cycle time by phase, tok/s and speedup over the plain twin (measured once), "
        "each with a 95%% interval. Then measure --confirm step counts, one at a time: the "
        "fastest predicted, then the fastest not measured by the prediction refit on the "
        "costs measured so far. "
        "Every run is recorded in the history as a sweep's point is (under the plan's name), "
        "the profiled run with the prediction, each confirmed one with its prediction and the "
        "errors. Trees (topk > 1) are refused: the model holds for chains. Exit code: 0; 1 if "
        "a measured point's outputs were not equivalent; 64 for bad input or a run the model "
        "cannot predict from (recorded all the same); 69 if a server failed; 75 if the budget "
        "ran out before anything was measured.",
    )
    add = parser.add_argument
    add_options(add, ("config",))
    add("--scenario", metavar="NAME", help="the scenario to plan (default: the first default one)")
    add("--name", help="the plan's name, its runs' scenario in the history (default SCENARIO-plan)")
    add(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"the chain's steps in the profiled run (default {DEFAULT_STEPS}); steps 1 up "
        "to it are predicted",
    )
    add("--topk", type=int, default=None, help="1 (chains), the only topk a plan predicts")
    add(
        "--confirm",
        type=int,
        default=DEFAULT_CONFIRM,
        metavar="N",
        help=f"measure N step counts, each the fastest not measured by the latest prediction "
        f"(refit on the confirmations before it; default {DEFAULT_CONFIRM}; 0: none)",
    )
    add("--env", action="append", default=[], metavar="NAME=V1,V2", help="an environment axis")
    add("--repeats", type=int, help="repeats per server (default: the scenario's)")
    add("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    add("--budget-s", type=float, help="launch no server after this many seconds")
    add_plain_reuse(add)
    add_options(add, ("engine", "db", "profile"))
    add("--json", metavar="PATH", help="also write the plan as JSON here")
    add("--markdown", metavar="PATH", help="also write the table here")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.plan.render import plan_json, render_markdown
    from perfgate.plan.run import PlanRunner

    # Outputs and a history that cannot be written fail before anything is launched.
    check_outputs(args)
    chosen = selection_from(settings, writes=True, names=_scenario_name(args))
    config, profile = chosen.config, chosen.profile
    base = with_plain_reuse(chosen.scenario, args)
    spec = plan_spec(args, config, base)
    runner = PlanRunner(
        spec=spec,
        base=base,
        profile=profile,
        history_url=chosen.history_url,
        workdir=process_folder(config.path.parent) / f"plan-{spec.name}",
        context=detect_context(config.path.parent, clean_paths=[config.baselines_dir]),
        config_file=config.path,
        budget_s=args.budget_s,
        progress=stderr_reporter(),  # stdout carries the table
        refresh_plain=args.refresh_plain,
    )
    result = runner.run()
    markdown = render_markdown(result)
    print(markdown)
    write_outputs(args, markdown, plan_json(result))
    return int(result.exit_code())


def _scenario_name(args: argparse.Namespace) -> Callable[[Config], list[str]]:
    """--scenario, else the config's first default scenario."""
    return lambda config: [args.scenario or config.default_scenarios[0]]


def plan_spec(args: argparse.Namespace, config: Config, base: Scenario) -> Any:
    """The plan the flags ask for; refuses what the model cannot predict (exit 64)."""
    from perfgate.plan.results import PlanSpec

    _refuse_trees(args.topk, base, config)
    if args.steps < 2:
        raise ConfigError(
            f"--steps {args.steps} leaves no shorter chain to predict",
            field="--steps",
            fix="profile at more steps than you want to choose among, e.g. --steps 8",
        )
    if args.confirm < 0:
        raise ConfigError("must be >= 0", field="--confirm", fix="give a count, or 0 for none")
    if args.repeats is not None and args.repeats < 1:
        raise ConfigError("must be >= 1", field="--repeats", fix="time at least one repeat")
    if args.budget_s is not None and not 0 < args.budget_s < math.inf:
        raise ConfigError(
            f"must be a finite number > 0, not {args.budget_s}",
            field="--budget-s",
            fix="give seconds, e.g. 450",
        )
    name = args.name or f"{base.name}-plan"
    check_history_name(name, field="the plan's name, its runs' scenario (--name)")
    if name in config.scenarios:
        raise ConfigError(
            f"the plan's name {name!r} is a scenario's: its runs would mix with the gate's",
            field="--name",
            fix="give the plan another name",
        )
    return PlanSpec(
        name=name,
        scenario=base.name,
        steps=args.steps,
        env=dict(parse_env_flag(text) for text in args.env),
        repeats=args.repeats,
        confirm=args.confirm,
        seed=args.seed,
    )


def _refuse_trees(topk: int | None, base: Scenario, config: Config) -> None:
    """A plan predicts chains: refuse --topk > 1, and a tree scenario unless --topk 1."""
    why = (
        "a tree's acceptance depends on its shape and its draft tokens, which one chain's "
        "depths do not tell"
    )
    if topk is not None and topk != 1:
        raise ConfigError(
            f"plans predict chains only (topk = 1), not topk = {topk}: {why}",
            field="--topk",
            fix="measure trees with `perfgate sweep --topk ... --draft-tokens ...`",
        )
    if topk is None and base.topk != 1:
        raise ConfigError(
            f"scenario {base.name!r} drafts trees (topk = {base.topk}); plans predict chains "
            f"only: {why}",
            file=config.path,
            field=f"scenarios.{base.name}.topk",
            fix="pass --topk 1 to plan its chains, or measure its trees with `perfgate sweep`",
        )
