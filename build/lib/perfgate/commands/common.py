"""What several commands share: finding the history and the baselines."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from perfgate.config import DEFAULT_HISTORY, find_config, load_config, resolve_sqlite_url
from perfgate.errors import ConfigError


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
