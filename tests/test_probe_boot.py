"""The probe's start-up file runs the `sitecustomize` further down the path, and runs once per
process even when that one runs "any other sitecustomize" back, as a user's might."""

import os
import subprocess
import sys
from pathlib import Path

from perfgate.probe import BOOT_DIR

from .hang import HANG_S

CHAINING = """
import importlib.machinery, importlib.util, os, sys
print("second ran", flush=True)
here = os.path.dirname(os.path.abspath(__file__))
rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
if spec is not None:
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
"""


def test_a_sitecustomize_that_runs_the_probes_back_runs_once_and_the_server_starts(
    tmp_path: Path,
) -> None:
    second = tmp_path / "second"
    second.mkdir()
    (second / "sitecustomize.py").write_text(CHAINING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(second)])
    done = subprocess.run(
        [sys.executable, "-c", "print('main ran')"],
        env=env, capture_output=True, text=True, timeout=HANG_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "RecursionError" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["second ran", "main ran"], done.stdout
