"""`perfgate baseline`: approve recorded runs into the baselines, show one, or migrate old files."""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from perfgate import metrics
from perfgate.baselines import (
    DEFAULT_KEEP,
    MAX_RUNS,
    SCHEMA_VERSION,
    Baseline,
    approve_run,
    baseline_path,
    load_baseline,
    write_baseline,
)
from perfgate.commands import add_command
from perfgate.commands.common import one_scenario, run_id
from perfgate.config import Config, Scenario, load_config
from perfgate.devices import runner_profile
from perfgate.errors import ConfigError
from perfgate.files import check_output_folder
from perfgate.fingerprint import diff_fingerprints, injected
from perfgate.gate import DEFAULT_BETA, DEFAULT_TOLERANCE
from perfgate.gate.attribution import cycle_profile
from perfgate.gate.estimate import clean_runs
from perfgate.gate.planning import run_sd, supported_tolerance
from perfgate.gate.stats import median, pooled_pairwise_sd
from perfgate.gate.verdict import Status
from perfgate.measured_verdicts import RUN_OVERHEAD_S, runner_s
from perfgate.reference import scenario_gating
from perfgate.results import Measurement, RunRecord
from perfgate.settings import Settings, add_options

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def register(commands: Any) -> None:
    parser = add_command(commands, "baseline")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    update = actions.add_parser(
        "update",
        help="append recorded runs to their scenario's baseline",
        description="Append recorded runs to baselines/<profile>/<scenario>.json, keeping the "
        "last K approved runs. Tolerances and gated metrics come from the scenario's config. "
        "Refuses runs that failed equivalence, were incomparable, inconclusive or errors, or "
        "come from a dirty tree, unless --force.",
    )
    update.add_argument(
        "--run",
        type=run_id,
        required=True,
        action="append",
        metavar="ID",
        help="run id in the history; repeat to approve several runs of one scenario",
    )
    update.add_argument("--approved-by", required=True, metavar="NAME")
    update.add_argument("--reason", required=True, metavar="TEXT")
    update.add_argument("--force", action="store_true", help="approve despite the refusals")
    update.add_argument(
        "--keep",
        type=int,
        metavar="K",
        help=f"keep the last K approved runs (1 to {MAX_RUNS}; default: the file's, or "
        f"{DEFAULT_KEEP}): the more runs, the better the spread between launches is known "
        "and the fewer runs a verdict needs",
    )
    _add_paths(update, db=True)
    update.set_defaults(handler=handle_update)

    show = actions.add_parser("show", help="print a baseline")
    show.add_argument("--scenario", required=True, metavar="NAME")
    add_options(show.add_argument, ("profile",))
    _add_paths(show, db=False)
    show.set_defaults(handler=handle_show)

    migrate = actions.add_parser(
        "migrate",
        help=f"rewrite older baseline files as schema {SCHEMA_VERSION}",
        description="Rewrite every baseline file of an older schema in the current one. Phase "
        "means (for attribution) are filled in from the history for the runs it still holds.",
    )
    _add_paths(migrate, db=True)
    migrate.set_defaults(handler=handle_migrate)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def _add_paths(parser: argparse.ArgumentParser, *, db: bool) -> None:
    add_options(
        parser.add_argument, ("config", "baselines", "db") if db else ("config", "baselines")
    )


def _refusals(record: RunRecord, current_fingerprint: dict[str, str] | None) -> list[str]:
    reasons = []
    if not record.measurement.outputs_pass:
        reasons.append(
            f"its outputs failed equivalence ({record.measurement.equivalence.summary()})"
        )
    bad = {Status.INCOMPARABLE, Status.INCONCLUSIVE, Status.ERROR}
    for verdict in record.verdicts:
        if verdict.status in bad:
            reasons.append(f"{verdict.metric} was {verdict.status.value}")
    if record.context.dirty:
        reasons.append("it was measured on a tree with uncommitted changes")
    if current_fingerprint is not None:
        changed = diff_fingerprints(current_fingerprint, dict(record.measurement.fingerprint))
        if changed:
            names = ", ".join(name for name, _, _ in changed)
            reasons.append(f"its environment differs from the baseline's ({names})")
    return reasons


def _refuse_injected(record: RunRecord) -> None:
    """Refuse a run slowed on purpose (perfgate.spec.slowdown), whatever --force says: it
    validates the gate, and as a baseline it would make the real code look fast."""
    slowed = injected(record.measurement.fingerprint)
    if slowed is not None:
        raise ConfigError(
            f"run {record.id} cannot be approved: it was slowed on purpose ({slowed}, "
            "injected_slowdown in its fingerprint, set by --debug-slow-phase, "
            "PERFGATE_DEBUG_SLOW_PHASE or the verify delay); no such run becomes a baseline, "
            "--force or not",
            field="--run",
            fix="approve runs measured without the slowdown",
        )


def _load_records(settings: Settings, run_ids: list[int]) -> list[RunRecord]:
    from perfgate.store import history, load_run

    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        records = [load_run(session, run_id) for run_id in run_ids]
    return one_scenario(
        records, "different baselines", "approve the runs of one scenario and profile at a time"
    )


def _gating(
    config: Config, scenario: str, existing: Baseline | None
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Tolerances and gated metrics: the scenario's config, else the existing file's."""
    found = config.scenarios.get(scenario)
    if found is None and existing is not None:
        return dict(existing.tolerances), existing.gated
    return scenario_gating(found)


def handle_update(settings: Settings, args: argparse.Namespace) -> int:
    return update_baseline(
        settings, args.run, args.approved_by, args.reason, force=args.force, keep=args.keep
    )


def update_baseline(
    settings: Settings,
    run_ids: list[int],
    approved_by: str,
    reason: str,
    *,
    force: bool = False,
    keep: int | None = None,
) -> int:
    """Append the runs `run_ids` to their scenario's baseline (`perfgate baseline update`)."""
    for flag, value in (("--approved-by", approved_by), ("--reason", reason)):
        if not value.strip():  # the file keeps who approved and why; neither may be blank
            raise ConfigError(
                "is empty",
                field=flag,
                fix=f"say {'who approved' if flag == '--approved-by' else 'why'}",
            )
    if settings.baselines is not None:
        check_output_folder(settings.baselines, "--baselines")
    config = load_config(settings.config)
    records = _load_records(settings, run_ids)
    first = records[0].measurement
    path = baseline_path(
        settings.baselines_dir(config.baselines_dir), first.profile, first.scenario
    )
    identity = {"profile": first.profile, "scenario": first.scenario}
    baseline = load_baseline(path, **identity) if path.exists() else None
    if keep is not None:
        if not 1 <= keep <= MAX_RUNS:
            raise ConfigError(f"is {keep}", field="--keep", fix=f"keep 1 to {MAX_RUNS} runs")
        baseline = replace(baseline, keep=keep) if baseline else _empty(first, keep)
    tolerances, gated = _gating(config, first.scenario, baseline)
    for record in records:
        _refuse_injected(record)
        refusals = _refusals(record, dict(baseline.fingerprint) if baseline else None)
        if refusals and not force:
            raise ConfigError(
                f"run {record.id} cannot be approved: {'; '.join(refusals)}",
                field="--run",
                fix="choose another run, or pass --force if a reviewer accepts this",
            )
        m = record.measurement
        baseline = approve_run(
            baseline,
            profile=m.profile,
            scenario=m.scenario,
            fingerprint=m.fingerprint,
            samples=m.samples(),
            phase_ms=m.phase_ms(),
            tolerances=tolerances,
            gated=gated,
            run_id=record.id,
            commit=record.context.commit,
            approved_by=approved_by,
            reason=reason,
        )
    assert baseline is not None  # one --run at least: argparse requires it
    scenario = config.scenarios.get(first.scenario)
    if scenario is not None:
        baseline, notes = derive_tolerances(baseline, scenario, records, config.alpha)
        for note in notes:
            print(note)
    write_baseline(baseline, path)
    print(f"wrote {path}: {len(baseline.runs)} approved run(s), newest #{records[-1].id}")
    return 0


def _empty(first: Measurement, keep: int) -> Baseline:
    """A baseline of no runs yet that keeps `keep` (its runs come from the approval)."""
    return Baseline(first.profile, first.scenario, dict(first.fingerprint), {}, (), keep=keep)


def derive_tolerances(
    baseline: Baseline, scenario: Scenario, records: list[RunRecord], alpha: float
) -> tuple[Baseline, list[str]]:
    """The baseline with each gated metric's tolerance that the scenario does not set derived
    from the approved runs' own spread: the default (3%), or wider where the spread between
    launches allows no sharper verdict within the scenario's runner time
    (perfgate.gate.planning.supported_tolerance). Returns the notes that say so.

    A metric the scenario sets a tolerance for keeps it: that is the team's call.
    """
    runs = baseline.metric_runs()
    took = sorted(runner_s([r.measurement]) for r in records)
    run_s = took[len(took) // 2] + RUN_OVERHEAD_S if took else 0.0
    budget = max(math.floor(scenario.max_runner_s / run_s), 1) if run_s > 0 else 1
    tolerances = dict(baseline.tolerances)
    notes = []
    for metric in baseline.gated:
        found = run_sd(runs.get(metric, ()))
        if metric in scenario.tolerances or found is None:
            continue
        sd, count = found
        supported = supported_tolerance(
            sd, count, alpha=alpha, beta=DEFAULT_BETA, max_runs=min(scenario.max_runs, budget)
        )
        if supported > tolerances.get(metric, DEFAULT_TOLERANCE):
            tolerances[metric] = supported
            notes.append(
                f"{metric}: tolerance {supported:.1%}, derived from the approved runs (their "
                f"launches scatter {sd:.2%}, {count} runs): no sharper verdict fits "
                f"{min(scenario.max_runs, budget)} runs (max_runs {scenario.max_runs}, and "
                f"{run_s:.0f} s a run in max_runner_s = {scenario.max_runner_s:g}); "
                f"the scenario sets none (set scenarios.{scenario.name}.tolerances.{metric} "
                "to choose one)"
            )
    return replace(baseline, tolerances=tolerances), notes


def handle_show(settings: Settings, args: argparse.Namespace) -> int:
    config = load_config(settings.config)
    profile = runner_profile(settings.profile)
    path = baseline_path(settings.baselines_dir(config.baselines_dir), profile, args.scenario)
    baseline = load_baseline(path, profile=profile, scenario=args.scenario)
    for line in render_baseline(baseline):
        print(line)
    return 0


def render_baseline(baseline: Baseline) -> list[str]:
    """The baseline as text: per metric its centre and spreads, the phases, the approvals."""
    lines = [
        f"{baseline.path}: scenario {baseline.scenario} on {baseline.profile}, "
        f"schema {baseline.schema_version}, {len(baseline.runs)} approved run(s) "
        f"(keeps {baseline.keep})",
        f"  {'metric':<16}{'tolerance':>10}{'centre':>12}{'between':>9}{'within':>8}  runs",
    ]
    runs = baseline.metric_runs()
    for metric in baseline.gated:
        logs = clean_runs(runs.get(metric, []))
        centres = [median(r) for r in logs]
        centre = math.exp(statistics.fmean(centres)) if centres else math.nan
        between = statistics.stdev(centres) if len(centres) > 1 else math.nan
        within = pooled_pairwise_sd(logs)
        tolerance = baseline.tolerances.get(metric, 0.0)
        lines.append(
            f"  {metric:<16}{tolerance:>10.1%}{centre:>12.4g}{between:>9.2%}"
            f"{within[0] if within else math.nan:>8.2%}  {len(centres)}"
        )
    lines += _render_phases(baseline)
    for run in baseline.runs:
        where = f" (on {run.machine})" if run.machine else ""
        lines.append(
            f"  run #{run.run_id}{where} approved by {run.approved_by} at {run.approved_at}: "
            f"{run.reason}"
        )
    return lines


def _render_phases(baseline: Baseline) -> list[str]:
    profile = cycle_profile(baseline.phase_runs("spec"))
    if profile is None:
        return [
            "  phases: none recorded (attribution unavailable); re-approve runs, or run "
            "`perfgate baseline migrate` while the history still holds them"
        ]
    named = "  ".join(
        f"{phase} {profile.phase_ms[phase]:.3g}"
        for phase in (*metrics.NAMED_PHASES, metrics.CYCLE)
        if phase in profile.phase_ms
    )
    return [f"  phases, mean ms per cycle: {named}"]


def handle_migrate(settings: Settings, args: argparse.Namespace) -> int:
    config = load_config(settings.config)
    directory = settings.baselines_dir(config.baselines_dir)
    files = sorted(directory.glob("*/*.json"))
    loaded = [load_baseline(p, profile=p.parent.name, scenario=p.stem) for p in files]
    old = [b for b in loaded if b.schema_version < SCHEMA_VERSION]
    if not old:
        print(f"{directory}: every baseline file is schema {SCHEMA_VERSION} already")
        return 0
    from perfgate.store import history

    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        for baseline in old:
            migrated, found = _with_history_phases(session, baseline)
            assert baseline.path is not None  # loaded from a file
            write_baseline(migrated, baseline.path)
            print(
                f"{baseline.path}: schema {baseline.schema_version} -> {SCHEMA_VERSION}, phase "
                f"means for {found} of {len(migrated.runs)} run(s) from the history"
            )
    return 0


def _with_history_phases(session: Session, baseline: Baseline) -> tuple[Baseline, int]:
    """The baseline with each run's phase means from the history, and how many were found."""
    from perfgate.store import load_run

    runs, found = [], 0
    for run in baseline.runs:
        try:
            record = load_run(session, run.run_id) if run.run_id is not None else None
        except ConfigError:  # the history no longer holds that run
            record = None
        if record is not None:
            run, found = replace(run, phase_ms=record.measurement.phase_ms()), found + 1
        runs.append(run)
    return replace(baseline, runs=tuple(runs)), found
