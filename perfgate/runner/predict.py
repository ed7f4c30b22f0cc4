"""The fingerprint `perfgate run` will record on this machine, told before any server starts.

A run's fingerprint is `collect_fingerprint` over the speculative server's /server_info. Most of
what that server reports is known without launching it: the embedded engine reports perfgate's
version, its interpreter's `torch.__version__` (which may name a local build, `+cu130`, that
the package metadata lacks) and `model_identity` of the model folders it loads; SGLang
reports its release (read from the scenario's interpreter) and no model identity, so the
fingerprint keeps the scenario's model names and perfgate's own torch. The prediction is that
same function over the predicted /server_info, so the two cannot drift apart. A field that only
a running server can tell is named as unchecked, never guessed.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.config import Scenario
from perfgate.fingerprint import collect_fingerprint, diff_fingerprints
from perfgate.hardware import GpuInfo
from perfgate.sglang import facts as sglang_facts
from perfgate.sglang.facts import InstalledVersions
from perfgate.version import perfgate_version

# A model folder whose weights are larger is not hashed before the run (the server hashes it).
MAX_HASHED_WEIGHTS_BYTES = 512 * 2**20
# What a server tells that doctor cannot, field by field, when it cannot be told.
_SERVER_FIELDS = ("engine_version", "model", "draft", "torch")


@dataclass(frozen=True)
class PredictedServer:
    """What a scenario's speculative server will report, as far as it is known before launch.

    ``info`` holds /server_info's keys that the fingerprint reads; ``unchecked`` maps each
    fingerprint field that cannot be known yet to why.
    """

    info: Mapping[str, Any]
    unchecked: Mapping[str, str]
    installed: InstalledVersions | None = None  # the scenario's interpreter, where it was asked


@dataclass(frozen=True)
class Prediction:
    """The fingerprint a run will record here, less the fields only a running server tells."""

    fingerprint: Mapping[str, str]
    unchecked: Mapping[str, str]

    def differences(self, recorded: Mapping[str, str]) -> list[tuple[str, str | None, str | None]]:
        """(field, recorded value, value here) for every field that is known and differs.

        An empty list means a run here will match ``recorded`` on every checked field; the
        unchecked ones are told after the server starts.
        """
        return [
            d for d in diff_fingerprints(recorded, self.fingerprint) if d[0] not in self.unchecked
        ]


def predict_server(scenario: Scenario, environ: Mapping[str, str]) -> PredictedServer:
    """The /server_info facts of ``scenario``'s speculative server, read without launching it.

    Raises ConfigError where the run would refuse the scenario: SGLang missing or unsupported in
    its interpreter, an embedded model that does not exist.
    """
    if scenario.engine == "sglang":
        python = scenario.python or sys.executable
        installed = sglang_facts.installed_versions(python, {**environ, **scenario.env})
        release = sglang_facts.require_sglang(installed, f"scenarios.{scenario.name}.python")
        return PredictedServer({"version": release.version}, {}, installed)
    if scenario.python and not _same_file(scenario.python, sys.executable):
        why = f"the embedded server runs in {scenario.python}, with its own perfgate"
        return PredictedServer({}, dict.fromkeys(_SERVER_FIELDS, why))
    from perfgate.engines.embedded.model_dirs import load_format_of

    info: dict[str, Any] = {"version": perfgate_version()}
    unchecked = {}
    torch_version = _server_torch()
    if torch_version is None:
        unchecked["torch"] = "torch is not installed"
    else:
        info["torch_version"] = torch_version
    seeded = load_format_of((*scenario.extra_args, *scenario.spec_extra_args)) == "dummy"
    for key, field, name in (
        ("model_identity", "model", scenario.model),
        ("draft_model_identity", "draft", scenario.draft),
    ):
        identity, why = _embedded_identity(name, seeded)
        if identity is None:
            unchecked[field] = why
        else:
            info[key] = identity
    return PredictedServer(info, unchecked)


def predict_fingerprint(
    scenario: Scenario,
    server: PredictedServer | None,
    gpus: GpuInfo | None,
    environ: Mapping[str, str],
) -> Prediction:
    """The fingerprint a run of ``scenario`` will record here (``server`` None: not known)."""
    if server is None:
        server = PredictedServer({}, dict.fromkeys(_SERVER_FIELDS, "the engine check failed"))
    fingerprint = collect_fingerprint(scenario, server.info, gpus, environ)
    for field in server.unchecked:
        fingerprint.pop(field, None)
    return Prediction(fingerprint, dict(server.unchecked))


def _server_torch() -> str | None:
    """torch as the embedded server reports it: ``torch.__version__``, whose local part
    (``+cu130``) the package's metadata may lack; None where torch is not installed. Read from
    the literal in torch's own version.py, neither importing torch (2 s and more, which doctor
    need not pay) nor running that file."""
    found = importlib.util.find_spec("torch")
    if found is None or not found.submodule_search_locations:
        return None
    try:
        tree = ast.parse(Path(found.submodule_search_locations[0], "version.py").read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def _embedded_identity(name: str, seeded: bool = False) -> tuple[str | None, str]:
    """The identity the embedded server will report for a model, or None and why not.

    ``seeded``: the server seeds the weights (``--load-format dummy``) whatever there are.
    """
    from perfgate.engines.embedded.model_dirs import model_identity, resolve_model

    weights = resolve_model(name).weights
    if seeded or weights is None:
        return model_identity(name, seeded=True), ""
    if weights.stat().st_size > MAX_HASHED_WEIGHTS_BYTES:
        size_mib = weights.stat().st_size // 2**20
        return None, f"{weights} ({size_mib} MiB) is hashed by the server, not before it starts"
    return model_identity(name), ""


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False
