"""What several commands share: reading run ids and counts, and checking that the runs named
belong together."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError

if TYPE_CHECKING:
    from perfgate.results import RunRecord

# The largest integer the history stores: SQLite's INTEGER and PostgreSQL's BIGINT, 64 bits.
HISTORY_INT_MAX = 2**63 - 1


def run_id(text: str) -> int:
    """A run id, as argparse's `type`: a whole number from 1 to HISTORY_INT_MAX."""
    return _whole_number(text, 1, "a run id")


def run_count(text: str) -> int:
    """A number of runs, as argparse's `type` (0: all of them), at most HISTORY_INT_MAX."""
    return _whole_number(text, 0, "a number of runs")


def _whole_number(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= HISTORY_INT_MAX:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {what}: a whole number from {low} to {HISTORY_INT_MAX}, the "
            "largest the history stores"
        )
    return value


def one_scenario(records: Sequence[RunRecord], belong_to: str, fix: str) -> list[RunRecord]:
    """`records`, if they are all of one scenario and profile; a ConfigError on --run if not.

    `belong_to` says what differs ("different baselines"), `fix` what to do instead.
    """
    scenarios = {(r.measurement.profile, r.measurement.scenario) for r in records}
    if len(scenarios) > 1:
        listed = ", ".join(f"{scenario} on {profile}" for profile, scenario in sorted(scenarios))
        raise ConfigError(f"the runs belong to {belong_to} ({listed})", field="--run", fix=fix)
    return list(records)
