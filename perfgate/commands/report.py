"""`perfgate report`: render the HTML trend report from the history."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfgate.commands.common import history_url
from perfgate.errors import ConfigError
from perfgate.report import write_history_report
from perfgate.report.links import safe_url
from perfgate.store import RunFilter, close_history, database_errors, open_history


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "report",
        help="write the HTML trend report from the history",
        description="Write the HTML trend report: one self-contained file, viewable offline.",
    )
    parser.add_argument("--config", metavar="PATH", help="perfgate.toml to read")
    parser.add_argument("--db", metavar="URL", help="history database (SQLAlchemy URL)")
    parser.add_argument("--out", metavar="PATH", default="reports/index.html")
    parser.add_argument("--scenario", metavar="NAME", help="only this scenario's runs")
    parser.add_argument("--profile", metavar="NAME", help="only this runner profile's runs")
    parser.add_argument("--branch", metavar="NAME", help="only this branch's runs")
    parser.add_argument(
        "--repo-url",
        metavar="URL",
        help="the repository's web page, for commit and PR links "
        "(default: read from the runs' GitHub Actions URLs)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, _rest: list[str]) -> int:
    if args.repo_url is not None and safe_url(args.repo_url) is None:
        raise ConfigError(
            f"{args.repo_url!r} is not an http(s) URL",
            field="--repo-url",
            fix="give the repository's web address, e.g. https://github.com/OWNER/REPO",
        )
    where = RunFilter(scenario=args.scenario, profile=args.profile, branch=args.branch)
    sessions = open_history(history_url(args))
    try:
        with database_errors(sessions), sessions() as session:
            path = write_history_report(Path(args.out), session, where, args.repo_url)
    finally:
        close_history(sessions)
    print(f"wrote {path}")
    return 0
