"""Per-phase timing inside the server process: the environment that turns it on, and reading it.

`runtime` runs inside the server; `reader` on the client side. This module stays light: it is
imported by the launcher, not by servers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import perfgate
from perfgate.errors import ConfigError
from perfgate.spec.probe import EVERY_VARIABLE, parse_every

DIR_VARIABLE = "PERFGATE_PROBE_DIR"  # set and non-empty: the probe is on in that server
RANGES_VARIABLE = "PERFGATE_PROBE_RANGES"  # "1": mark the phases for profilers all along
BOOT_DIR = Path(__file__).resolve().parent / "boot"
PERFGATE_HOME = Path(perfgate.__file__).resolve().parent.parent


def probe_env(
    out_dir: Path,
    table: str,
    inherited: Mapping[str, str] | None = None,
    *,
    engine_version: str | None = None,
    mode: str | None = None,
    scenario_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the variables that activate the probe in a server, with `table`'s targets for
    the engine's release and the server's mode ("spec" or "plain").

    They go on top of the scenario's own `env` (`scenario_env`), so PYTHONPATH keeps what
    both set: the probe's folder first, then the scenario's PYTHONPATH, then the inherited one.
    """
    env = os.environ if inherited is None else inherited
    try:
        parse_every(env.get(EVERY_VARIABLE))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    pythonpath = [str(BOOT_DIR)]
    for source in (scenario_env or {}, env):
        if source.get("PYTHONPATH"):
            pythonpath.append(source["PYTHONPATH"])
    variables = {
        DIR_VARIABLE: str(out_dir),
        "PERFGATE_PROBE_TABLE": table,
        "PERFGATE_PROBE_HOME": str(PERFGATE_HOME),
        "PYTHONPATH": os.pathsep.join(pythonpath),
    }
    if engine_version:
        variables["PERFGATE_PROBE_ENGINE_VERSION"] = engine_version
    if mode:
        variables["PERFGATE_PROBE_MODE"] = mode
    return variables
