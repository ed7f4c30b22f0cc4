"""Build the exact command lines of a scenario's speculative server and its plain twin."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from perfgate.config import Scenario
from perfgate.env_names import is_env_name
from perfgate.sglang.facts import PINNED, SglangRelease, all_names, release
from perfgate.spec.scenario import OWNED_FIELDS, SPECULATIVE_FLAGS, flag_role

Mode = Literal["spec", "plain"]
MODES: tuple[Mode, ...] = ("plain", "spec")  # measured in perfgate.pipeline.MEASURE_ORDER

ENGINE_MODULES = {
    "embedded": "perfgate.engines.embedded.server",
    "sglang": "sglang.launch_server",
}

# SGLang lowers --max-running-requests to 48 in speculative mode when it is unset, and leaves
# the plain server at its own default: perfgate always sets it, the same on both servers.
DEFAULT_MAX_RUNNING_REQUESTS = 48

# Flags perfgate sets itself, by role, and the scenario field to use instead of passing them
# (perfgate.spec.scenario declares each field's flag).
OWNED_ROLES = {
    **OWNED_FIELDS,
    "host": "(perfgate chooses it)",
    "port": "(perfgate chooses a free one)",
}
DEVICE_TIMER_VARIABLE = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"
NO_OVERLAP = "--disable-overlap-schedule"


@dataclass(frozen=True)
class ServerCommand:
    """One server's command line and the variables set on top of the inherited environment."""

    scenario: str
    engine: str
    mode: Mode
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 30000
    engine_version: str | None = None  # the SGLang release the flags were chosen for

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def on_port(self, port: int) -> ServerCommand | None:
        """The same command listening on `port`, or None where its argv does not name its
        port by a flag SGLang has given it (perfgate.sglang.facts; the embedded engine's too)."""
        flags = all_names("port")
        argv = list(self.argv)
        for index, word in enumerate(argv[:-1]):
            if word in flags and argv[index + 1] == str(self.port):
                argv[index + 1] = str(port)
                return replace(self, argv=tuple(argv), port=port)
        return None

    def shell(self) -> str:
        """Return the command as one shell line: `VAR=value ... argv`, everything quoted.

        A name a shell could not assign (the config refuses them) goes through `env`, quoted
        like every other word, so that pasting the line never runs anything but the server.
        """
        variables = sorted(self.env.items())
        if all(is_env_name(key) for key in self.env):
            assignments = [f"{key}={shlex.quote(value)}" for key, value in variables]
            return " ".join([*assignments, shlex.join(self.argv)])
        return shlex.join(["env", *(f"{key}={value}" for key, value in variables), *self.argv])


def flag_names(scenario: Scenario, sglang: SglangRelease | None) -> SglangRelease:
    """The release whose flag names the command uses: the installed SGLang's, or (for the
    embedded engine, which speaks SGLang's flags) those of the pinned release."""
    if scenario.engine == "sglang" and sglang is not None:
        return sglang
    return release(PINNED)


def speculative_overlap(
    scenario: Scenario, sglang: SglangRelease, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether SGLang runs `scenario`'s speculative server with its overlap scheduler.

    Not where a pass-through flag turns it off; not where `SGLANG_ENABLE_SPEC_V2` (read from
    the scenario's `env` over the inherited `environ`) is off, as it is by default up to
    0.5.10.post1; not for a tree (topk > 1) on releases that run trees on spec v1.
    """
    if NO_OVERLAP in (*scenario.extra_args, *scenario.spec_extra_args):
        return False
    if sglang.has("spec_v2_switch"):
        value = {**(os.environ if environ is None else environ), **scenario.env}.get(SPEC_V2)
        default = sglang.has("spec_v2_default_on")
        if not _env_bool(value, default):
            return False
    return not (scenario.topk > 1 and sglang.has("spec_tree_without_overlap"))


def _spec_overlaps(
    scenario: Scenario, flags: SglangRelease, environ: Mapping[str, str] | None
) -> bool:
    """Whether the speculative server runs with the overlap schedule: on SGLang as
    `speculative_overlap` says; on the embedded engine unless its flag turns it off."""
    if scenario.engine == "sglang":
        return speculative_overlap(scenario, flags, environ)
    return embedded_overlap(scenario)


def embedded_overlap(scenario: Scenario) -> bool:
    """Whether an embedded scenario's servers run the overlap schedule: the engine's default,
    unless the scenario's arguments for its speculative server turn it off."""
    return NO_OVERLAP not in (*scenario.extra_args, *scenario.spec_extra_args)


def _env_bool(value: str | None, default: bool) -> bool:
    # As SGLang's EnvBool reads it; anything else is its default.
    if value is not None and value.lower() in ("true", "1", "yes", "y"):
        return True
    if value is not None and value.lower() in ("false", "0", "no", "n"):
        return False
    return default


def server_command(
    scenario: Scenario,
    mode: Mode,
    *,
    port: int,
    host: str = "127.0.0.1",
    extra_env: Mapping[str, str] | None = None,
    sglang: SglangRelease | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerCommand:
    """Return the command that launches `scenario`'s server in `mode` ("spec" or "plain").

    `sglang` is the knowledge for the installed SGLang release (perfgate.sglang.facts); it
    names the flags. The fairness knobs (`--max-running-requests`, dtype, tp, pass-through
    `extra_args`, the environment) are the same on both servers, and so is the scheduling:
    where SGLang runs the speculative server without its overlap scheduler (see
    `speculative_overlap`; `environ` is what the server inherits), or the embedded engine's
    has it turned off, the plain twin runs without it too.
    """
    flags = flag_names(scenario, sglang)
    flag = flags.name
    python = scenario.python or sys.executable
    # -P (Python 3.11+, as perfgate): the embedded server is the installed perfgate's, never a
    # copy in the folder the run starts from. SGLang's own interpreter is left as it is.
    unsafe_path = ["-P"] if scenario.engine == "embedded" else []
    argv = [python, *unsafe_path, "-m", ENGINE_MODULES[scenario.engine]]
    argv += [flag(flag_role("model")), scenario.model, flag(flag_role("tp")), str(scenario.tp)]
    if scenario.dtype:
        argv += [flag(flag_role("dtype")), scenario.dtype]
    if scenario.device and scenario.engine == "embedded":
        argv += ["--device", scenario.device]
    max_running = scenario.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
    argv += [flag(flag_role("max_running_requests")), str(max_running)]
    argv += [flag("host"), host, flag("port"), str(port)]
    env = dict(scenario.env)
    if scenario.engine_metrics and scenario.engine == "sglang":
        argv.append(flag(flag_role("engine_metrics")))
        if flags.has("device_timer"):
            env[DEVICE_TIMER_VARIABLE] = "1"
    argv += scenario.extra_args
    if mode == "spec":
        argv += _speculative_args(scenario, flag)
        argv += scenario.spec_extra_args
    else:
        argv += scenario.plain_extra_args
        if NO_OVERLAP not in argv and not _spec_overlaps(scenario, flags, environ):
            argv.append(NO_OVERLAP)
    return ServerCommand(
        scenario=scenario.name,
        engine=scenario.engine,
        mode=mode,
        argv=tuple(argv),
        env={**env, **(extra_env or {})},
        host=host,
        port=port,
        engine_version=sglang.version if scenario.engine == "sglang" and sglang else None,
    )


def _speculative_args(scenario: Scenario, flag: Callable[[str], str]) -> list[str]:
    # All three of steps/topk/draft tokens are always explicit: SGLang's auto-selection
    # would otherwise choose per model architecture (topk 4 for Llama).
    return [
        arg
        for name, role in SPECULATIVE_FLAGS
        for arg in (flag(role), str(getattr(scenario, name)))
    ]
