"""The probe's one setting a scenario may carry in its `env`: the stride of timed decode cycles.

Read by the configuration (to refuse a bad value before any server starts) and by the probe
inside each server (perfgate.probe.runtime), so it lives here, in the pure core.
"""

from __future__ import annotations

EVERY_VARIABLE = "PERFGATE_PROBE_EVERY"  # time one decode cycle in this many


def parse_every(value: str | None) -> int | None:
    """The stride `PERFGATE_PROBE_EVERY` asks for: None when unset, a ValueError when it is
    not a whole number from 1 up."""
    if value is None or value.strip() == "":
        return None
    try:
        every = int(value)
    except ValueError:
        every = 0
    if every < 1:
        raise ValueError(
            f"{EVERY_VARIABLE}={value!r} is not a whole number from 1 up; set it to the stride "
            "of timed decode cycles (1 times every cycle) or unset it for the default"
        )
    return every
