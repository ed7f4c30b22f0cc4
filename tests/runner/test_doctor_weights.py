"""`perfgate doctor` on the models a recipe trains on the machine: cached, missing, or seeded."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.engines.embedded.recipes import recipe_cache_dir
from perfgate.runner.doctor import Check, Machine, check_config, check_engines, check_weights
from perfgate.spec.options import GateOptions

from ..conftest import TINY_SCENARIO, write_config

LARGE = """
[scenarios.large]
engine = "embedded"
model = "perfgate/llama-large"
draft = "perfgate/eagle3-llama-large"
device = "cuda"
"""
SEEDED = LARGE.replace("[scenarios.large]", "[scenarios.seeded]") + (
    'extra_args = ["--load-format", "dummy"]\n'
)
SEEDED_SPEC_ONLY = LARGE.replace("[scenarios.large]", "[scenarios.half]") + (
    'spec_extra_args = ["--load-format=dummy"]\n'
)
FIX = "train them once on this machine: perfgate embedded train --size large --device cuda"


def _weights(tmp_path: Path, *scenarios: str) -> list[Check]:
    config = write_config(tmp_path, TINY_SCENARIO + LARGE + SEEDED + SEEDED_SPEC_ONLY)
    options = GateOptions(config=str(config), scenarios=scenarios)
    machine = Machine(options, {"PERFGATE_MODEL_CACHE": str(tmp_path / "models")})
    check_config(machine)
    check_engines(machine)
    return check_weights(machine)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return recipe_cache_dir("large", environ={"PERFGATE_MODEL_CACHE": str(tmp_path / "models")})


def test_missing_weights_are_a_warning_with_the_command(tmp_path: Path, cache: Path) -> None:
    (check,) = _weights(tmp_path, "tiny", "large")  # the tiny models ship their weights
    assert (check.name, check.status, check.exit_code) == ("weights large", "warn", 0)
    assert check.detail == (
        "perfgate/llama-large, perfgate/eagle3-llama-large: no trained weights on this "
        "machine; the run will refuse them"
    )
    assert check.fix.startswith(FIX) and check.fix.endswith(f"cached in {cache})")


def test_cached_weights_are_ok_and_say_where(tmp_path: Path, cache: Path) -> None:
    for folder in ("llama-large", "eagle3-llama-large"):
        (cache / folder).mkdir(parents=True)
        (cache / folder / "model.safetensors").write_bytes(b"trained")
    (check,) = _weights(tmp_path, "large")
    assert (check.status, check.detail) == (
        "ok",
        f"perfgate/llama-large, perfgate/eagle3-llama-large: trained weights cached in {cache}",
    )


def test_seeded_servers_need_no_weights_but_both_servers_must_seed_the_target(
    tmp_path: Path,
) -> None:
    seeded, half = _weights(tmp_path, "seeded", "half")
    assert (seeded.name, seeded.status) == ("weights seeded", "ok")
    assert seeded.detail == "seeded (--load-format dummy): the run measures speed only"
    # Only the speculative server seeds: the plain one loads the target's weights.
    assert (half.status, half.fix.startswith(FIX)) == ("warn", True)
    assert half.detail.startswith("perfgate/llama-large: no trained weights")
