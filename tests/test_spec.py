"""The scenario schema: every field says what it means, and the digest, the plain-reuse key,
the config's keys and the flags perfgate owns all follow from what it says."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import load_config
from perfgate.engines.server_commands import OWNED_ROLES
from perfgate.fingerprint import collect_fingerprint, scenario_digest
from perfgate.plain_reuse import plain_reuse_key
from perfgate.serving.sglang_bench import FIGURES
from perfgate.sglang.facts import PINNED as PINNED_SGLANG
from perfgate.sglang.facts import release
from perfgate.spec.scenario import (
    SCENARIO_FIELDS,
    SCENARIO_KEYS,
    SERVER_SHAPES,
    Digest,
    Scenario,
    Shapes,
    unclassified,
)
from perfgate.spec.serving import CROSS_CHECK_METRICS

ROOT = Path(__file__).resolve().parent.parent

# A scenario that sets every knob; its digest was computed before the schema existed.
PINNED = Scenario(
    name="pinned",
    engine="sglang",
    model="meta-llama/Llama-3.1-8B-Instruct",
    draft="lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
    steps=2,
    topk=1,
    draft_tokens=3,
    tp=8,
    dtype="bfloat16",
    max_running_requests=16,
    prompts=("a", "b"),
    max_new_tokens=128,
    extra_args=("--attention-backend", "fa3"),
    spec_extra_args=("--x",),
    plain_extra_args=("--y",),
)


def test_every_scenario_field_is_classified() -> None:
    assert unclassified(Scenario, SCENARIO_FIELDS) == []


def test_a_field_left_out_of_the_table_is_found() -> None:
    @dataclass(frozen=True)
    class Wider(Scenario):
        new_knob: int = 1

    assert unclassified(Wider, SCENARIO_FIELDS) == ["new_knob"]
    fewer = {k: v for k, v in SCENARIO_FIELDS.items() if k != "steps"}
    assert unclassified(Scenario, fewer) == ["steps"]


def test_the_digest_of_a_constructed_scenario_is_pinned() -> None:
    assert scenario_digest(PINNED) == "8eebbe7365e13639"
    assert scenario_digest(replace(PINNED, engine_metrics=True)) == "7ef9960ea0e2eb96"


def test_the_shipped_scenarios_keep_their_digests() -> None:
    config = load_config(ROOT / "perfgate.toml")
    digests = {name: scenario_digest(s) for name, s in config.scenarios.items()}
    assert digests == {
        "embedded-default": "87eeefd398ae3be4",
        "embedded-large-gpu": "5938f63423c1e8e1",
        "embedded-large-tp2": "08f5533b8cc7c15c",
        "embedded-large-tp8": "bf5c08144d978332",
        "embedded-tp2": "406f3b397c521798",
        "llama31-8b-eagle3-tp1": "e4dd71f54c32bc6f",
        "llama33-70b-eagle3-tp8": "f93ef0826d9ae8a8",
        "sglang-tiny-eagle3": "990880725011a99e",
    }


# Records of a scenario as it was then: embedded-large-gpu ran seeded weights with simulated
# acceptance until it got trained weights (benchmarks/results/h200-real-weights.md).
SUPERSEDED = {"h200-first-contact/baseline-h200x1-embedded-large-gpu.json"}


def _stored_baselines() -> list[Path]:
    kept = [
        ROOT / "tests/data/baseline-cpu-amd-epyc-2c.json",
        *ROOT.glob("baselines/*/*.json"),
        *ROOT.glob("benchmarks/results/*/baseline-*.json"),
    ]
    results = ROOT / "benchmarks/results"
    return [
        p
        for p in kept
        if p.is_file()
        and not (p.is_relative_to(results) and str(p.relative_to(results)) in SUPERSEDED)
    ]


@pytest.mark.parametrize("path", _stored_baselines(), ids=lambda p: p.name)
def test_a_committed_baseline_matches_its_shipped_scenario(path: Path) -> None:
    stored = json.loads(path.read_text("utf-8"))
    scenario = load_config(ROOT / "perfgate.toml").scenarios[stored["scenario"]]
    assert scenario_digest(scenario) == stored["fingerprint"]["scenario"]


def test_some_committed_baseline_is_checked() -> None:
    assert _stored_baselines()


def _changed(name: str, value: Any) -> Any:
    """Another valid value for field `name`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, tuple):
        return (*value, "--other")
    if isinstance(value, Mapping):
        return {**value, "NCCL_ALGO": "Tree"}
    unset = {"dtype": "float16", "device": "cpu", "max_running_requests": 7}
    unset["plain_max_age_h"] = 24.0
    unset["python"] = "python3"
    assert name in unset, f"give _changed a value for {name} (default {value!r})"
    return unset[name]


def _with(name: str) -> Scenario:
    return replace(PINNED, **{name: _changed(name, getattr(PINNED, name))})


def _fingerprint(scenario: Scenario) -> dict[str, str]:
    return collect_fingerprint(scenario, {"version": "0.5.23"}, None, environ={})


def _plain_key(scenario: Scenario) -> str:
    return plain_reuse_key(scenario, "0.5.23", "2.9.1", None, environ={})


SERVER_FIELDS = [n for n, s in SCENARIO_FIELDS.items() if s.shapes in SERVER_SHAPES]
DIGEST_FIELDS = [
    n for n, s in SCENARIO_FIELDS.items() if s.digest in (Digest.ALWAYS, Digest.WHEN_ON)
]
CHANGEABLE = [n for n in SCENARIO_FIELDS if n not in ("name", "serving")]


@pytest.mark.parametrize("name", SERVER_FIELDS)
def test_a_field_that_shapes_a_server_is_fingerprinted(name: str) -> None:
    assert SCENARIO_FIELDS[name].digest is not Digest.NO
    assert _fingerprint(_with(name)) != _fingerprint(PINNED)


@pytest.mark.parametrize("name", CHANGEABLE)
def test_the_digest_follows_the_table(name: str) -> None:
    changes = scenario_digest(_with(name)) != scenario_digest(PINNED)
    assert changes == (name in DIGEST_FIELDS)


@pytest.mark.parametrize(
    "name", [n for n, s in SCENARIO_FIELDS.items() if s.shapes in (Shapes.BOTH, Shapes.PLAIN)]
)
def test_a_field_that_shapes_the_plain_twin_changes_its_reuse_key(name: str) -> None:
    assert _plain_key(_with(name)) != _plain_key(PINNED)


@pytest.mark.parametrize("name", [n for n, s in SCENARIO_FIELDS.items() if s.plain_reuse])
def test_each_plain_side_field_changes_the_reuse_key(name: str) -> None:
    assert _plain_key(_with(name)) != _plain_key(PINNED)


@pytest.mark.parametrize("name", [n for n, s in SCENARIO_FIELDS.items() if s.shapes is Shapes.SPEC])
def test_a_speculative_field_leaves_the_reuse_key(name: str) -> None:
    assert _plain_key(_with(name)) == _plain_key(PINNED)


def test_a_serving_load_is_a_measurement_outside_the_digest() -> None:
    from perfgate.spec.serving import ServingLoad

    served = replace(PINNED, serving=ServingLoad(request_rate=4.0))
    assert SCENARIO_FIELDS["serving"].shapes is Shapes.MEASUREMENT
    assert scenario_digest(served) == scenario_digest(PINNED)


def test_the_config_accepts_the_keys_it_always_did() -> None:
    ints = {"steps", "topk", "draft_tokens", "tp", "max_running_requests", "max_new_tokens"}
    ints |= {"repeats", "warmup", "max_runs"}
    strs = {"engine", "model", "draft", "algorithm", "dtype", "device", "python", "equivalence"}
    lists = {"extra_args", "spec_extra_args", "plain_extra_args"}
    floats = {"startup_timeout_s", "request_timeout_s", "near_tie_margin", "plain_max_age_h"}
    floats |= {"gpu_release_timeout_s", "max_runner_s"}
    tables = {"env", "tolerances", "serving"}
    others = {"prompts", "prompts_file", "gated", "max_near_tie_share", "engine_metrics"}
    assert ints | strs | lists | floats | tables | others == SCENARIO_KEYS


def test_perfgate_owns_the_flags_of_its_fields() -> None:
    assert OWNED_ROLES == {
        "model": "model",
        "tp": "tp",
        "dtype": "dtype",
        "max_running_requests": "max_running_requests",
        "host": "(perfgate chooses it)",
        "port": "(perfgate chooses a free one)",
        "algorithm": "algorithm",
        "draft": "draft",
        "steps": "steps",
        "topk": "topk",
        "draft_tokens": "draft_tokens",
        "metrics": "engine_metrics",
    }


def test_every_declared_flag_is_one_sglang_has() -> None:
    known = release(PINNED_SGLANG)
    roles = [s.flag for s in SCENARIO_FIELDS.values() if s.flag]
    assert roles and all(known.has(role) for role in roles)


def test_the_cross_check_metrics_are_sglang_bench_figures() -> None:
    assert set(CROSS_CHECK_METRICS) == set(FIGURES)


def test_the_schema_imports_no_heavy_library() -> None:
    code = (
        "import sys, perfgate.spec.scenario, perfgate.spec.sweep, perfgate.spec.document\n"
        "import perfgate.config\n"
        "heavy = [m for m in ('torch', 'sqlalchemy', 'httpx') if m in sys.modules]\n"
        "config = [m for m in ('perfgate.sweep', 'perfgate.serving', 'perfgate.gate.judge')"
        " if m in sys.modules]\n"
        "print(heavy, config)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[] []"
