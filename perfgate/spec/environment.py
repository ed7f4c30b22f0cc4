"""Which of a run's fingerprint fields say its environment, and which only tell about the run.

Two runs are comparable when their environments match. Two fields tell about a run without
making it incomparable with others: the slowdown injected on purpose (perfgate.spec.slowdown),
judged against the runs it would be judged against unslowed, and the machine it ran on
(perfgate.hardware.machine_id), since the machines of one kind share a baseline whose approved
runs each name theirs. Pure: the fingerprint, the baselines and the reference all read it.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfgate.spec.slowdown import FINGERPRINT_FIELD

MACHINE_FIELD = "machine"
SOFT_FIELDS = (FINGERPRINT_FIELD, MACHINE_FIELD)


def reference_fingerprint(fingerprint: Mapping[str, str]) -> dict[str, str]:
    """What a run's reference must match: its fingerprint without the soft fields."""
    return {k: v for k, v in fingerprint.items() if k not in SOFT_FIELDS}


def machine(fingerprint: Mapping[str, str]) -> str | None:
    """The machine a run's fingerprint says it ran on, or None (a CPU run, an older run)."""
    return fingerprint.get(MACHINE_FIELD) or None
