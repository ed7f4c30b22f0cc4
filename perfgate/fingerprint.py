"""The environment fingerprint: what must match for two runs' timings to be comparable."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from perfgate.config import Scenario
from perfgate.engines.server_commands import embedded_overlap, speculative_overlap
from perfgate.errors import ConfigError
from perfgate.hardware import GpuInfo, cpu_model
from perfgate.machine_state import load_state_fingerprint
from perfgate.sglang.facts import release
from perfgate.spec import slowdown
from perfgate.spec.environment import MACHINE_FIELD, reference_fingerprint
from perfgate.spec.scenario import digest_fields
from perfgate.version import perfgate_version

# Variables that change performance; their values join the fingerprint as `env.NAME`.
PERF_ENV_PREFIXES = ("NCCL_", "SGLANG_", "PYTORCH_", "TORCH_", "CUDA_", "OMP_", "MKL_")
PERF_ENV_IGNORED = {"PERFGATE_PROBE_DIR", "TORCH_HOME"}


def scenario_digest(scenario: Scenario) -> str:
    """A short hash of everything in a scenario that shapes its numbers."""
    shaping = digest_fields(scenario)  # perfgate.spec.scenario.SCENARIO_FIELDS says which
    blob = json.dumps(shaping, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def collect_fingerprint(
    scenario: Scenario,
    server_info: Mapping[str, Any],
    gpus: GpuInfo | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Build the fingerprint of a run from the scenario, the server and the machine."""
    env = {**(os.environ if environ is None else environ), **scenario.env}
    print_ = {
        "engine": scenario.engine,
        "engine_version": str(server_info.get("version", "unknown")),
        "model": str(server_info.get("model_identity", scenario.model)),
        "draft": str(server_info.get("draft_model_identity", scenario.draft)),
        "torch": str(server_info.get("torch_version") or _installed("torch")),
        "perfgate": perfgate_version(),
        "scenario": scenario_digest(scenario),
        "gpu": gpus.name if gpus else "none",
        "gpu_count": str(gpus.count if gpus else 0),
    }
    if gpus:
        print_ |= {"driver": gpus.driver, "cuda": gpus.cuda}
        if gpus.machine:
            print_[MACHINE_FIELD] = gpus.machine
        # The GPUs' clock and power settings, as the runner's job-started hook saved them.
        print_ |= load_state_fingerprint(env)
    else:
        print_ |= {"cpu": cpu_model(), "cpu_count": str(os.cpu_count() or 0)}
    if scenario.engine == "sglang":
        print_ |= overlap_field(scenario, print_["engine_version"], env)
    elif not embedded_overlap(scenario):
        print_["overlap_schedule"] = "off"  # the embedded engine's default, on, is not named
    print_ |= injection_field(server_info)
    for name, value in env.items():
        if name.startswith(PERF_ENV_PREFIXES) and name not in PERF_ENV_IGNORED:
            print_[f"env.{name}"] = value
    return dict(sorted(print_.items()))


def overlap_field(scenario: Scenario, version: str, env: Mapping[str, str]) -> dict[str, str]:
    """Whether both servers ran with SGLang's overlap scheduler (perfgate schedules the plain
    twin as SGLang schedules the speculative server); empty for a release it does not know."""
    try:
        known = release(version)
    except ConfigError:
        return {}
    return {"overlap_schedule": "on" if speculative_overlap(scenario, known, env) else "off"}


def injection_field(server_info: Mapping[str, Any]) -> dict[str, str]:
    """The slowdown the server injects on purpose, named (perfgate.spec.slowdown); empty when
    it injects none. The embedded engine's /server_info carries its flags as resolved."""
    named = []
    slowed = server_info.get("debug_slow_phase")
    if isinstance(slowed, Mapping) and slowed:
        named.append(slowdown.describe({str(k): float(v) for k, v in slowed.items()}))
    delay = server_info.get("debug_verify_delay_ms")
    if isinstance(delay, int | float) and delay > 0:
        named.append(slowdown.describe_delay(float(delay)))
    return {slowdown.FINGERPRINT_FIELD: ", ".join(named)} if named else {}


def injected(fingerprint: Mapping[str, str]) -> str | None:
    """The slowdown a run's fingerprint says was injected into it, or None."""
    return fingerprint.get(slowdown.FINGERPRINT_FIELD) or None


def diff_fingerprints(
    baseline: Mapping[str, str], current: Mapping[str, str]
) -> list[tuple[str, str | None, str | None]]:
    """Return (field, baseline value, current value) for every field that differs.

    An injected slowdown (perfgate.spec.slowdown) is no difference: a run slowed on purpose is
    judged against the baseline it would be judged against unslowed, which is what it checks.
    No baseline holds one (`perfgate baseline update` refuses such runs). Nor is the machine:
    the machines of one kind share a baseline, which names those its runs ran on.
    """
    baseline, current = reference_fingerprint(baseline), reference_fingerprint(current)
    fields = sorted(set(baseline) | set(current))
    return [
        (f, baseline.get(f), current.get(f)) for f in fields if baseline.get(f) != current.get(f)
    ]


def _installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"
