"""Reuse the plain twin's figures from the history instead of loading the model twice.

A TP8 model can take many minutes to load; the plain twin does not change when only the
speculative side does. Its figures (tok/s, phases, outputs) are reused from the newest run
whose plain fingerprint matches, when that run is younger than the scenario's
`plain_max_age_h`. The fingerprint covers what shapes the plain server's numbers: the
machine (GPU, driver, CUDA or CPU), the engine and its release, torch, perfgate, the
performance-relevant environment (NCCL_*, CUDA_*, SGLANG_*...), and the scenario's plain
side: the fields perfgate.spec.scenario marks `plain_reuse` (model, tp, dtype, device,
max_running_requests, prompts, max_new_tokens, repeats, warmup, extra_args,
plain_extra_args, engine metrics). Draft and steps/topk/draft tokens are not part of it.
`--refresh-plain` measures the twin anyway, and so does every run on a main branch, so the
history keeps getting fresh plain figures.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from perfgate.config import Scenario
from perfgate.fingerprint import collect_fingerprint
from perfgate.hardware import GpuInfo
from perfgate.results import ModeResult
from perfgate.spec.scenario import plain_side
from perfgate.store.reuse import latest_plain_result

MAIN_BRANCHES = ("main", "master")
_SPEC_ONLY = ("draft", "scenario")  # fingerprint fields of the speculative side


def plain_reuse_key(
    scenario: Scenario,
    engine_version: str,
    torch_version: str | None,
    gpus: GpuInfo | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """A digest of everything that shapes the plain twin's figures (see the module doc)."""
    info = {"version": engine_version, "torch_version": torch_version or "none"}
    fingerprint = collect_fingerprint(scenario, info, gpus, environ)
    for key in _SPEC_ONLY:
        fingerprint.pop(key, None)
    blob = json.dumps(
        {"fingerprint": fingerprint, "plain": plain_side(scenario)}, sort_keys=True, default=list
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def refresh_reason(scenario: Scenario, refresh_option: bool, branch: str | None) -> str | None:
    """Why the plain twin must be measured now, or None when it may be reused."""
    if scenario.plain_max_age_h is None:
        return "the scenario sets no plain_max_age_h"
    if refresh_option:
        return "--refresh-plain"
    if branch in MAIN_BRANCHES:
        return f"runs on {branch} refresh it"
    return None


def find_reusable_plain(
    sessions: sessionmaker[Session], scenario: Scenario, reuse_key: str, now: datetime | None = None
) -> ModeResult | None:
    """The plain result to reuse for `scenario`, marked with the run it came from; or None."""
    assert scenario.plain_max_age_h is not None
    cutoff = (now or datetime.now(UTC)) - timedelta(hours=scenario.plain_max_age_h)
    with sessions() as session:
        found = latest_plain_result(session, reuse_key, cutoff)
    if found is None:
        return None
    run_id, result = found
    return replace(result, reused_from=run_id, reuse_key=reuse_key)
