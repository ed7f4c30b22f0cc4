"""benchmarks/record.sh, what every GPU script starts from: perfgate from the checkout, with
its pytest plugin found where perfgate is not installed (a lent GPU machine's image). The one
check serves every script: benchmarks/sglang_live.sh's steps get what use_checkout's get."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from .hang import HANG_S

REPO = Path(__file__).resolve().parents[1]

# The environment a script's steps run in, given the script's interpreter and its checkout.
Setup = Callable[[str, Path], dict[str, str]]


def _use_checkout(python: str, repo: Path) -> dict[str, str]:
    """The environment `use_checkout` leaves, with python as the script's interpreter and repo
    as the checkout."""
    script = (
        f'source "{REPO}/benchmarks/record.sh"; repo="{repo}"; python="{python}"; '
        "unset PYTEST_PLUGINS PYTHONPATH; use_checkout; env"
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=HANG_S
    )
    return _parse(done.stdout)


def _sglang_live(python: str, checkout: Path) -> dict[str, str]:
    """The environment benchmarks/sglang_live.sh runs its steps in, from a copy of its scripts
    in checkout: its record stage started through a stand-in interpreter that writes down its
    environment, then runs python (whatever the step makes of it)."""
    (checkout / "benchmarks").mkdir(parents=True)
    for name in ("sglang_live.sh", "stages.sh", "record.sh"):
        shutil.copy2(REPO / "benchmarks" / name, checkout / "benchmarks" / name)
    seen = checkout.parent / "seen.env"
    stand_in = checkout.parent / "python"
    stand_in.write_text(f'#!/bin/sh\nenv > "{seen}"\nexec "{python}" "$@"\n')
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_PLUGINS", "PYTHONPATH")}
    subprocess.run(
        [str(checkout / "benchmarks" / "sglang_live.sh"), str(checkout.parent / "out"), "record"],
        env={**env, "PYTHON": str(stand_in)},
        capture_output=True,
        check=False,  # a bare interpreter fails the step itself; its environment is the point
        timeout=HANG_S,
    )
    return _parse(seen.read_text())


def _parse(env: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in env.splitlines() if "=" in line)


@pytest.fixture(params=[_use_checkout, _sglang_live], ids=["use_checkout", "sglang_live.sh"])
def setup(request: pytest.FixtureRequest) -> Setup:
    return request.param  # type: ignore[no-any-return]


def _bare_python(folder: Path) -> Path:
    venv.create(folder, with_pip=False)  # no perfgate, so no pytest11 entry point
    return folder / "bin" / "python"


def test_a_python_without_perfgate_installed_gets_the_plugin_by_name(
    setup: Setup, tmp_path: Path
) -> None:
    # A checkout as it travels to a GPU machine: no perfgate.egg-info (git ignores it), whose
    # entry point an editable install here would otherwise offer through PYTHONPATH.
    checkout = tmp_path / "checkout"
    env = setup(str(_bare_python(tmp_path / "bare")), checkout)
    assert env.get("PYTEST_PLUGINS") == "perfgate.plugin"
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(checkout)  # nothing else after it
    assert env["NCCL_NVLS_ENABLE"] == "0"


def test_a_perfgate_that_registers_no_entry_point_gets_the_plugin_by_name(
    setup: Setup, tmp_path: Path
) -> None:
    """What pytest loads the plugin by is the entry point, not an installed distribution of
    that name: a perfgate whose metadata registers none gets the plugin by name."""
    python = _bare_python(tmp_path / "bare")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dist = tmp_path / "bare" / "lib" / version / "site-packages" / "perfgate-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: perfgate\nVersion: 0.0\n")
    env = setup(str(python), tmp_path / "checkout")
    assert env.get("PYTEST_PLUGINS") == "perfgate.plugin"


def test_an_installed_perfgate_keeps_its_entry_point_alone(setup: Setup, tmp_path: Path) -> None:
    env = setup(sys.executable, tmp_path / "checkout")  # the dev install registers the plugin
    assert "PYTEST_PLUGINS" not in env  # naming it as well would load it twice
