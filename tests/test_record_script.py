"""benchmarks/record.sh, what every GPU script starts from: perfgate from the checkout, with
its pytest plugin found where perfgate is not installed (a lent GPU machine's image)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _use_checkout(python: str, repo: Path = REPO) -> dict[str, str]:
    """The environment `use_checkout` leaves, with python as the script's interpreter and repo
    as the checkout."""
    script = (
        f'source "{REPO}/benchmarks/record.sh"; repo="{repo}"; python="{python}"; '
        "unset PYTEST_PLUGINS PYTHONPATH; use_checkout; env"
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_a_python_without_perfgate_installed_gets_the_plugin_by_name(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # no perfgate, so no pytest11 entry point
    # A checkout as it travels to a GPU machine: no perfgate.egg-info (git ignores it), whose
    # entry point an editable install here would otherwise offer through PYTHONPATH.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env = _use_checkout(str(bare / "bin" / "python"), checkout)
    assert env.get("PYTEST_PLUGINS") == "perfgate.plugin"
    assert env["PYTHONPATH"] == str(checkout)
    assert env["NCCL_NVLS_ENABLE"] == "0"


def test_an_installed_perfgate_keeps_its_entry_point_alone() -> None:
    env = _use_checkout(sys.executable)  # the dev install registers the plugin
    assert "PYTEST_PLUGINS" not in env  # naming it as well would load it twice
