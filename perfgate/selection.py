"""What a command measures and where its runs go, chosen once from the settings: `Selection`.

Every command that measures (run and pytest's gate session through the pipeline's GatePlan,
sweep, plan, bisect, profile, servers) and `perfgate doctor`, which predicts what a run will
meet, start the same way: read the config, choose the scenarios (--scenario, else the config's
defaults) on --engine where given, name the runner profile, find the history and, for a
command that records, prove that the history takes writes. `selection_from` is that one
start; what differs between commands is a keyword of it, so that no command checks less than
another by having its own copy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.config import Config, Scenario, load_config
from perfgate.devices import detect_gpus, runner_profile
from perfgate.errors import ConfigError
from perfgate.hardware import GpuInfo
from perfgate.spec.options import GateOptions


@dataclass(frozen=True)
class Selection:
    """The config, the scenarios chosen from it (in order, on --engine where given), the runner
    profile, the history's URL and the folder of the reviewed baselines."""

    config: Config
    scenarios: tuple[Scenario, ...]
    history_url: str
    baselines_dir: Path
    given_profile: str | None = None  # --profile (or $PERFGATE_PROFILE), its name checked
    detect: Callable[[], GpuInfo | None] = field(default=detect_gpus, repr=False, compare=False)

    @functools.cached_property
    def profile(self) -> str:
        """The runner profile: the one given, else named from this machine's GPUs, which are
        read when first asked for (a command that names no baseline or series reads none)."""
        return runner_profile(self.given_profile, self.detect)

    @property
    def scenario(self) -> Scenario:
        """The first scenario chosen: the one a command that measures one scenario takes."""
        return self.scenarios[0]

    @property
    def root(self) -> Path:
        """The folder of the config file, where `.perfgate/` lies."""
        return self.config.path.parent


def selection_from(
    options: GateOptions,
    *,
    writes: bool,
    names: Callable[[Config], Sequence[str]] | None = None,
    one: str | None = None,
    cwd: Path | None = None,
    detect: Callable[[], GpuInfo | None] = detect_gpus,
) -> Selection:
    """The selection `options` ask for; bad input fails here, before any server starts.

    `writes`: the command records runs, so the history must take a write (proven by one that
    is rolled back: perfgate.store.probe_write); a history that is wrong, unreachable or
    refuses writes fails here. `names`: the scenarios a command picks from the config itself
    (a sweep's table names its own), instead of --scenario. `one`: the command measures one
    scenario, which --scenario must name; `one` says so when it names none or several.
    `cwd`: where a relative SQLite path of --db is taken from (default: the current folder).
    `detect`: the GPUs the runner profile is named from when --profile is not given (read
    when `profile` is first asked for; a given name is checked here).
    """
    from perfgate.store import probe_write
    from perfgate.store.database import resolve_history_url

    config = load_config(options.config)
    chosen = list(options.scenarios) if names is None else list(names(config))
    if one is not None and len(chosen) != 1:
        raise ConfigError(one, field="--scenario", fix="name it: --scenario NAME")
    scenarios = tuple(config.select(chosen, options.engine))
    if options.profile:
        runner_profile(options.profile)  # a name the history cannot hold fails here
    # options.db holds $PERFGATE_DB_URL already, where Settings read it.
    history_url = resolve_history_url(options.db, cwd=cwd, config=config)
    if writes:
        probe_write(history_url)
    baselines = Path(options.baselines).resolve() if options.baselines else config.baselines_dir
    return Selection(config, scenarios, history_url, baselines, options.profile, detect)
