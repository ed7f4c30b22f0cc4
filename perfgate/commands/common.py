"""What several commands share: checking that the runs named belong together."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError

if TYPE_CHECKING:
    from perfgate.results import RunRecord


def one_scenario(records: Sequence[RunRecord], belong_to: str, fix: str) -> list[RunRecord]:
    """`records`, if they are all of one scenario and profile; a ConfigError on --run if not.

    `belong_to` says what differs ("different baselines"), `fix` what to do instead.
    """
    scenarios = {(r.measurement.profile, r.measurement.scenario) for r in records}
    if len(scenarios) > 1:
        listed = ", ".join(f"{scenario} on {profile}" for profile, scenario in sorted(scenarios))
        raise ConfigError(f"the runs belong to {belong_to} ({listed})", field="--run", fix=fix)
    return list(records)
