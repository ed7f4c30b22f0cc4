"""`perfgate report`: render the HTML trend report from the history."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.commands import add_command
from perfgate.errors import ConfigError
from perfgate.files import check_output_file
from perfgate.settings import HISTORY_OPTIONS, Settings, add_options

if TYPE_CHECKING:
    from perfgate.config import Config
    from perfgate.store import RunFilter


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "report",
        description="Write the HTML trend report: one self-contained file, viewable offline.",
    )
    add_options(parser.add_argument, HISTORY_OPTIONS)
    parser.add_argument("--out", metavar="PATH", default="reports/index.html")
    # Filters, not the shared --scenario/--profile that choose what to run.
    parser.add_argument(
        "--scenario", dest="only_scenario", metavar="NAME", help="only this scenario's runs"
    )
    parser.add_argument(
        "--profile", dest="only_profile", metavar="NAME", help="only this runner profile's runs"
    )
    parser.add_argument("--branch", metavar="NAME", help="only this branch's runs")
    parser.add_argument(
        "--repo-url",
        metavar="URL",
        help="the repository's web page, for commit and PR links "
        "(default: read from the runs' GitHub Actions URLs)",
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.report import write_history_report
    from perfgate.report.links import safe_url
    from perfgate.store import RunFilter, history, recorded_names

    out = check_output_file(args.out, "--out")
    if args.repo_url is not None and safe_url(args.repo_url) is None:
        raise ConfigError(
            f"{args.repo_url!r} is not an http(s) URL",
            field="--repo-url",
            fix="give the repository's web address, e.g. https://github.com/OWNER/REPO",
        )
    where = RunFilter(scenario=args.only_scenario, profile=args.only_profile, branch=args.branch)
    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        recorded = recorded_names(session)
        check_names(where, recorded, settings.config)
        path = write_history_report(out, session, where, args.repo_url)
    if selects_a_run(where, recorded):
        print(f"wrote {path}")
    elif where.describe():
        print(f"wrote {path}: no recorded run matches {where.describe()}")
    else:
        print(f"wrote {path}: the history holds no run yet")
    return 0


def check_names(
    where: RunFilter, recorded: set[tuple[str, str, str | None]], config_path: str | None
) -> None:
    """Refuse a --scenario, --profile or --branch that neither the history nor the config has.

    The config is read only for a name the history lacks: a scenario it defines, or a runner
    profile it holds baselines for, exists before its first run.
    """
    branches = {branch for _, _, branch in recorded if branch is not None}
    if where.branch is not None and where.branch not in branches:
        problem = f"no run on branch {where.branch!r} in the history"
        raise _unknown("--branch", problem, branches)
    _refuse_unknown_name(
        "--scenario", "scenario", where.scenario, {s for s, _, _ in recorded}, config_path,
        lambda config: set(config.scenarios), "the config",
    )  # fmt: skip
    _refuse_unknown_name(
        "--profile", "runner profile", where.profile, {p for _, p, _ in recorded}, config_path,
        lambda config: baseline_profiles(config.baselines_dir), "the baselines",
    )  # fmt: skip


def _refuse_unknown_name(
    flag: str,
    kind: str,
    wanted: str | None,
    recorded: set[str],
    config_path: str | None,
    from_config: Callable[[Config], set[str]],
    source: str,
) -> None:
    """Refuse `wanted` when neither the history nor (if there is one) the config knows it."""
    if wanted is None or wanted in recorded:
        return
    config = _optional_config(config_path)
    if config is None:
        raise _unknown(flag, f"no {kind} {wanted!r} in the history", recorded)
    known = recorded | from_config(config)
    if wanted not in known:
        raise _unknown(flag, f"no {kind} {wanted!r} in {source} or the history", known)


def selects_a_run(where: RunFilter, recorded: set[tuple[str, str, str | None]]) -> bool:
    """True when the history holds a run of the scenario, profile and branch `where` names."""
    wanted = (where.scenario, where.profile, where.branch)
    return any(
        all(want is None or want == have for want, have in zip(wanted, names, strict=True))
        for names in recorded
    )


def baseline_profiles(baselines_dir: Path) -> set[str]:
    """The runner profiles with a folder of baselines (baselines/<profile>/)."""
    if not baselines_dir.is_dir():
        return set()
    return {entry.name for entry in baselines_dir.iterdir() if entry.is_dir()}


def _optional_config(path: str | None) -> Config | None:
    """The config given or found here; None when there is none (the report needs none)."""
    from perfgate.config import load_config, locate_config

    found = Path(path) if path else locate_config()
    return load_config(found) if found is not None else None


def _unknown(flag: str, problem: str, known: set[str]) -> ConfigError:
    fix = f"choose one of: {', '.join(sorted(known))}" if known else f"leave {flag} out"
    return ConfigError(problem, field=flag, fix=fix)
