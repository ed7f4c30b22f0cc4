"""`perfgate report`: render the HTML report from the history."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfgate.commands.common import history_url
from perfgate.report import write_report
from perfgate.store import list_runs, open_history


def register(commands: Any) -> None:
    parser = commands.add_parser("report", help="write the HTML trend report from the history")
    parser.add_argument("--config", metavar="PATH", help="perfgate.toml to read")
    parser.add_argument("--db", metavar="URL", help="history database (SQLAlchemy URL)")
    parser.add_argument("--out", metavar="PATH", default="reports/index.html")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, _rest: list[str]) -> int:
    sessions = open_history(history_url(args))
    with sessions() as session:
        runs = list_runs(session)
    path = write_report(Path(args.out), runs)
    print(f"wrote {path} ({len(runs)} runs)")
    return 0
