"""Build the exact command lines of a scenario's speculative server and its plain twin."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from perfgate.config import Scenario

Mode = Literal["spec", "plain"]
MODES: tuple[Mode, ...] = ("plain", "spec")  # the order a run measures them in

ENGINE_MODULES = {
    "embedded": "perfgate.engines.embedded.server",
    "sglang": "sglang.launch_server",
}

# SGLang lowers --max-running-requests to 48 in speculative mode when it is unset, and leaves
# the plain server at its own default: perfgate always sets it, the same on both servers.
DEFAULT_MAX_RUNNING_REQUESTS = 48


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

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def shell(self) -> str:
        """Return the command as one shell line: `VAR=value ... argv`, everything quoted."""
        assignments = [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        return " ".join([*assignments, shlex.join(self.argv)])


def server_command(
    scenario: Scenario,
    mode: Mode,
    *,
    port: int,
    host: str = "127.0.0.1",
    extra_env: Mapping[str, str] | None = None,
) -> ServerCommand:
    """Return the command that launches `scenario`'s server in `mode` ("spec" or "plain")."""
    argv = [scenario.python or sys.executable, "-m", ENGINE_MODULES[scenario.engine]]
    argv += ["--model-path", scenario.model, "--tp-size", str(scenario.tp)]
    if scenario.dtype:
        argv += ["--dtype", scenario.dtype]
    if scenario.device and scenario.engine == "embedded":
        argv += ["--device", scenario.device]
    max_running = scenario.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
    argv += ["--max-running-requests", str(max_running), "--host", host, "--port", str(port)]
    argv += scenario.extra_args
    if mode == "spec":
        argv += _speculative_args(scenario)
        argv += scenario.spec_extra_args
    else:
        argv += scenario.plain_extra_args
    env = {**scenario.env, **(extra_env or {})}
    return ServerCommand(
        scenario=scenario.name,
        engine=scenario.engine,
        mode=mode,
        argv=tuple(argv),
        env=env,
        host=host,
        port=port,
    )


def _speculative_args(scenario: Scenario) -> list[str]:
    # All three of steps/topk/draft tokens are always explicit: SGLang's auto-selection
    # would otherwise choose per model architecture.
    return [
        "--speculative-algorithm",
        scenario.algorithm,
        "--speculative-draft-model-path",
        scenario.draft,
        "--speculative-num-steps",
        str(scenario.steps),
        "--speculative-eagle-topk",
        str(scenario.topk),
        "--speculative-num-draft-tokens",
        str(scenario.draft_tokens),
    ]
