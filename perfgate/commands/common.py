"""What several commands share: finding the history and the baselines, checking run ids."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from perfgate.config import DEFAULT_HISTORY, find_config, load_config, resolve_sqlite_url
from perfgate.errors import ConfigError
from perfgate.results import RunRecord


def history_url(args: argparse.Namespace) -> str:
    """--db, else $PERFGATE_DB_URL, else the config's history, else the default file here."""
    if getattr(args, "db", None):
        return resolve_sqlite_url(args.db, Path.cwd())
    if os.environ.get("PERFGATE_DB_URL"):
        return resolve_sqlite_url(os.environ["PERFGATE_DB_URL"], Path.cwd())
    try:
        return load_config(getattr(args, "config", None) or find_config()).history_url
    except ConfigError:
        if getattr(args, "config", None):
            raise
        return resolve_sqlite_url(DEFAULT_HISTORY, Path.cwd())


def one_scenario(records: Sequence[RunRecord], belong_to: str, fix: str) -> list[RunRecord]:
    """`records`, if they are all of one scenario and profile; a ConfigError on --run if not.

    `belong_to` says what differs ("different baselines"), `fix` what to do instead.
    """
    scenarios = {(r.measurement.profile, r.measurement.scenario) for r in records}
    if len(scenarios) > 1:
        listed = ", ".join(f"{scenario} on {profile}" for profile, scenario in sorted(scenarios))
        raise ConfigError(f"the runs belong to {belong_to} ({listed})", field="--run", fix=fix)
    return list(records)
