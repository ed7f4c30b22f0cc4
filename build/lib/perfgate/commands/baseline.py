"""`perfgate baseline`: approve a recorded run into the baselines, or show one."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.baselines import approve_run, baseline_path, load_baseline, write_baseline
from perfgate.commands.common import history_url
from perfgate.config import load_config
from perfgate.errors import ConfigError
from perfgate.fingerprint import default_profile, detect_gpus, diff_fingerprints
from perfgate.gate import DEFAULT_TOLERANCE
from perfgate.gate.verdict import Status
from perfgate.results import RunRecord
from perfgate.store import load_run, open_history


def register(commands: Any) -> None:
    parser = commands.add_parser("baseline", help="update or show approved baselines")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    update = actions.add_parser(
        "update",
        help="append a recorded run to its scenario's baseline",
        description="Append a recorded run to baselines/<profile>/<scenario>.json, keeping the "
        "last K approved runs. Tolerances and gated metrics come from the scenario's config. "
        "Refuses runs that failed equivalence, were incomparable, inconclusive or errors, or "
        "come from a dirty tree, unless --force.",
    )
    update.add_argument("--run", type=int, required=True, metavar="ID", help="run id in history")
    update.add_argument("--approved-by", required=True, metavar="NAME")
    update.add_argument("--reason", required=True, metavar="TEXT")
    update.add_argument("--force", action="store_true", help="approve despite the refusals")
    update.add_argument("--config", metavar="PATH")
    update.add_argument("--db", metavar="URL")
    update.add_argument("--baselines", metavar="DIR")
    update.set_defaults(handler=handle_update)

    show = actions.add_parser("show", help="print a baseline")
    show.add_argument("--scenario", required=True, metavar="NAME")
    show.add_argument("--profile", metavar="NAME")
    show.add_argument("--config", metavar="PATH")
    show.add_argument("--baselines", metavar="DIR")
    show.set_defaults(handler=handle_show)


def _refusals(record: RunRecord, current_fingerprint: dict[str, str] | None) -> list[str]:
    reasons = []
    if not record.measurement.equivalence.ok:
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


def handle_update(args: argparse.Namespace, _rest: list[str]) -> int:
    config = load_config(args.config)
    sessions = open_history(history_url(args))
    with sessions() as session:
        record = load_run(session, args.run)
    m = record.measurement
    directory = Path(args.baselines) if args.baselines else config.baselines_dir
    path = baseline_path(directory, m.profile, m.scenario)
    existing = load_baseline(path) if path.exists() else None
    refusals = _refusals(record, dict(existing.fingerprint) if existing else None)
    if refusals and not args.force:
        raise ConfigError(
            f"run {args.run} cannot be approved: {'; '.join(refusals)}",
            field="--run",
            fix="choose another run, or pass --force if a reviewer accepts this",
        )
    # Tolerances and gated metrics are reviewed with the baseline: taken from the scenario's
    # config when it still exists, else kept from the existing file.
    scenario = config.scenarios.get(m.scenario)
    if scenario is not None:
        tolerances, gated = dict(scenario.tolerances), scenario.gated
    elif existing is not None:
        tolerances, gated = dict(existing.tolerances), existing.gated
    else:
        tolerances, gated = {}, metrics.DEFAULT_GATED
    updated = approve_run(
        existing,
        profile=m.profile,
        scenario=m.scenario,
        fingerprint=m.fingerprint,
        samples=m.samples(),
        tolerances={metric: tolerances.get(metric, DEFAULT_TOLERANCE) for metric in gated},
        gated=gated,
        run_id=record.id,
        commit=record.context.commit,
        approved_by=args.approved_by,
        reason=args.reason,
    )
    write_baseline(updated, path)
    print(f"wrote {path}: {len(updated.runs)} approved run(s), newest #{record.id}")
    return 0


def handle_show(args: argparse.Namespace, _rest: list[str]) -> int:
    config = load_config(args.config)
    directory = Path(args.baselines) if args.baselines else config.baselines_dir
    profile = args.profile or default_profile(detect_gpus())
    baseline = load_baseline(baseline_path(directory, profile, args.scenario))
    print(f"{baseline.path}: scenario {baseline.scenario} on {baseline.profile}")
    print(f"  {'metric':<16}{'tolerance':>10}{'median':>12}  runs")
    runs = baseline.metric_runs()
    for metric in baseline.gated:
        medians = [statistics.median(r) for r in runs.get(metric, []) if r]
        centre = statistics.median(medians) if medians else float("nan")
        tolerance = baseline.tolerances.get(metric, 0.0)
        print(f"  {metric:<16}{tolerance:>10.0%}{centre:>12.3f}  {len(medians)}")
    for run in baseline.runs:
        print(
            f"  run #{run.run_id} approved by {run.approved_by} at {run.approved_at}: {run.reason}"
        )
    return 0
