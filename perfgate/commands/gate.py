"""`perfgate gate`: judge recorded runs again, against their baseline or another one."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.baselines import baseline_path, load_baseline
from perfgate.commands import add_command
from perfgate.commands.common import one_scenario, run_id
from perfgate.config import Config, Scenario, load_config, locate_config
from perfgate.errors import ConfigError
from perfgate.gate import DEFAULT_ALPHA
from perfgate.gate.looks import scenario_alpha
from perfgate.gate.verdict import overall_status
from perfgate.measured_verdicts import judge_measurements
from perfgate.reference import (
    Reference,
    choose_reference,
    load_reviewed,
    requires_baseline,
)
from perfgate.results import RunRecord
from perfgate.settings import HISTORY_OPTIONS, Settings, add_options
from perfgate.verdict_text import render_record, verdicts_document


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "gate",
        description="Judge recorded runs against their scenario's reviewed baseline (or, "
        "without one for their machine, the earlier runs of that machine, as the run itself "
        "was judged), or --baseline FILE, and print the verdicts (--json: as JSON). One --run "
        "whose verdicts were judged "
        "together with earlier runs (measured again while inconclusive) brings those runs "
        "along. The exit code is the gate's.",
    )
    parser.add_argument(
        "--run",
        type=run_id,
        required=True,
        action="append",
        metavar="ID",
        help="run id in the history; repeat to judge several runs of one scenario together",
    )
    parser.add_argument("--baseline", metavar="FILE", help="judge against this baseline file")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.add_argument(
        "--alpha",
        type=float,
        metavar="A",
        help="the false-alarm level for the scenario's gated metrics; default: the level the "
        "run's session judged it at (its share of the config's), or the config's",
    )
    add_options(parser.add_argument, ("require-baseline", *HISTORY_OPTIONS, "baselines"))


def run(settings: Settings, args: argparse.Namespace) -> int:
    config = _config(settings, args)
    records = _records(settings, args)
    reference = _reference(settings, args, config, records)
    max_runs = reference.run_budget(_max_runs(config, records[-1]))
    first, budget = _recorded_plan(records[-1], max_runs)
    alpha = _alpha(args, config, records, first, budget)
    measurements = [r.measurement for r in records]
    baseline = reference.baseline
    if baseline is not None:
        verdicts = judge_measurements(
            measurements, baseline, alpha=alpha, max_runs=budget, first_runs=first
        )
    else:
        verdicts = list(reference.verdicts)
    status = overall_status(verdicts, all(m.outputs_pass for m in measurements))
    code = int(reference.exit_code(status))
    if args.json:
        path = str(baseline.path) if baseline is not None and baseline.path else None
        document = verdicts_document(records, verdicts, status, code, path)
        document["judged_against"] = reference.description
        print(json.dumps(document, indent=2, sort_keys=True))
        return code
    ids = ", ".join(f"#{r.id}" for r in records)
    print(f"judging run {ids} again")
    earlier = tuple(r.id for r in records[:-1] if r.id is not None)
    judged = replace(
        records[-1],
        verdicts=tuple(replace(v, with_runs=earlier) for v in verdicts),
        status=status,
        judged_against=reference.description,
    )
    for line in render_record(judged):
        print(line)
    return code


def _config(settings: Settings, args: argparse.Namespace) -> Config | None:
    """The config; none is needed when --baseline names the file (and --alpha or default)."""
    if settings.config or not args.baseline:
        return load_config(settings.config)
    found = locate_config()  # one found is read, and its mistakes said
    return load_config(found) if found is not None else None


def _recorded_plan(record: RunRecord, max_runs: int) -> tuple[int, int]:
    """The runs of the run's first look and its budget, as its session planned them; one and
    ``max_runs`` for a run recorded before verdicts said (or judged against local runs)."""
    if max_runs <= 1:
        return 1, 1
    planned = next((v for v in record.verdicts if v.planned_runs and v.run_budget), None)
    if planned is None or planned.planned_runs is None or planned.run_budget is None:
        return 1, max_runs
    return planned.planned_runs, planned.run_budget


def _alpha(
    args: argparse.Namespace,
    config: Config | None,
    records: list[RunRecord],
    first: int,
    budget: int,
) -> float:
    """The scenario's alpha: --alpha, else the level its session judged the run at.

    A session splits its alpha among its scenarios; the run's recorded verdicts say what its
    scenario got (see perfgate.gate.looks.scenario_alpha), so the run is judged again as its
    session judged it. A run recorded without verdicts gets the config's alpha.
    """
    if args.alpha is not None:
        if not 0 < args.alpha < 1:
            raise ConfigError(
                f"is {args.alpha}", field="--alpha", fix="give a level between 0 and 1"
            )
        return float(args.alpha)
    configured = config.alpha if config else DEFAULT_ALPHA
    levels = [v.alpha for v in records[-1].verdicts if v.alpha is not None]
    looks = budget - first + 1
    recorded = scenario_alpha(levels, len(records) - first + 1, looks)
    # A level recorded before looks spent alpha in shares reads as more than the config allows.
    return configured if recorded is None else min(recorded, configured)


def _max_runs(config: Config | None, record: RunRecord) -> int:
    """The scenario's run budget, from the config; the default where it does not say."""
    scenario = config.scenarios.get(record.measurement.scenario) if config else None
    if scenario is not None:
        return scenario.max_runs
    return Scenario.max_runs  # the dataclass's default


def _records(settings: Settings, args: argparse.Namespace) -> list[RunRecord]:
    """The runs named, preceded by the earlier runs a single run was judged with."""
    from perfgate.store import history, load_run

    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        records = [load_run(session, run_id) for run_id in args.run]
        if len(records) == 1:
            earlier = next((v.with_runs for v in records[0].verdicts if v.with_runs), ())
            records = [load_run(session, run_id) for run_id in earlier] + records
    return one_scenario(
        records, "different scenarios", "judge the runs of one scenario and profile together"
    )


def _reference(
    settings: Settings, args: argparse.Namespace, config: Config | None, records: list[RunRecord]
) -> Reference:
    """What to judge against: --baseline, else what the recording session would choose."""
    if args.baseline:
        baseline = load_baseline(Path(args.baseline))
        return Reference(f"judged against {args.baseline} ({len(baseline.runs)} run(s))", baseline)
    directory = Path(settings.baselines) if settings.baselines else None
    if directory is None:
        assert config is not None  # _config only returns None when --baseline is given
        directory = config.baselines_dir
    m = records[-1].measurement
    path = baseline_path(directory, m.profile, m.scenario)
    require = requires_baseline(settings.require_baseline, os.environ)
    reviewed = load_reviewed(path, m.profile, m.scenario, required=require)

    def earlier_runs() -> list[RunRecord]:
        from perfgate.pipeline import local_runs

        return local_runs(settings.history_url, m, before=records[0].id, existing=True)

    scenario = config.scenarios.get(m.scenario) if config else None
    return choose_reference(m, reviewed, earlier_runs, scenario, require_baseline=require)
