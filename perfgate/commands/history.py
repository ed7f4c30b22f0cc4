"""`perfgate history`: the recorded runs."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from perfgate.commands.common import history_url
from perfgate.store import list_runs, open_history


def register(commands: Any) -> None:
    parser = commands.add_parser("history", help="list recorded runs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="one line per run, newest last")
    listing.add_argument("--config", metavar="PATH")
    listing.add_argument("--db", metavar="URL")
    listing.add_argument("--scenario", metavar="NAME")
    listing.add_argument("--limit", type=int, default=20)
    listing.set_defaults(handler=handle_list)


def handle_list(args: argparse.Namespace, _rest: list[str]) -> int:
    sessions = open_history(history_url(args))
    with sessions() as session:
        runs = list_runs(session, scenario=args.scenario, limit=args.limit)
    print(f"{'run':>5}  {'started (UTC)':<17} {'scenario':<24} {'status':<12} {'spec tok/s':>10}")
    for run in runs:
        m = run.measurement
        tok_s = m.spec.samples.get("output_tok_s")
        value = f"{statistics.median(tok_s):.1f}" if tok_s else "-"
        stamp = m.started_at.strftime("%Y-%m-%d %H:%M")
        print(f"{run.id:>5}  {stamp:<17} {m.scenario:<24} {run.status.value:<12} {value:>10}")
    return 0
