"""The configuration file's layout outside the scenarios: its name, its top-level tables and
the `[perfgate]` settings with their defaults. Pure."""

from __future__ import annotations

CONFIG_FILE = "perfgate.toml"
DEFAULT_HISTORY = "sqlite:///.perfgate/history.db"
# The chance of any false alarm the gate allows per scenario, over all its looks, at the
# tolerance (perfgate.gate.judge says what it bounds exactly).
DEFAULT_ALPHA = 0.2

TOP_KEYS = frozenset({"perfgate", "scenarios", "sweeps"})
SETTINGS_KEYS = frozenset({"default_scenarios", "baselines", "history", "alpha"})
