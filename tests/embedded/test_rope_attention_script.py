"""benchmarks/rope_attention.py: its fused kernel computes what the engine's attention does,
and its timing runs end to end, on the CPU under Triton's interpreter."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import perfgate

from ..hang import HANG_S
from .common import server_env

SCRIPT = Path(perfgate.__file__).resolve().parents[1] / "benchmarks" / "rope_attention.py"

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The script under Triton's interpreter, through interpreter_waste: the same script and
    numbers, without two costs of the interpreter."""
    env = {**server_env(), "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "tests.embedded.interpreter_waste", str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=env)


def test_the_fused_kernel_matches_the_engines_attention_and_cache() -> None:
    """A decode, a verify and a per-head tree mask, over a cache with old entries."""
    done = _run("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tokens 5, tree True" in done.stderr


def test_the_timing_runs_and_writes_both_ways_for_decode_and_verify(tmp_path: Path) -> None:
    # One timed call of each way, no warm-up (the interpreter runs every layer's kernels in
    # each call; the first calls compile): the times are not what this checks.
    done = _run("--out", str(tmp_path), "--device", "cpu", "--model", "perfgate/llama-tiny",
                "--batch", "2", "--position", "10", "--replays", "1", "--blocks", "1",
                "--warmups", "0")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    timed = json.loads((tmp_path / "results.json").read_text())["us_a_layer"]
    assert sorted(timed) == [
        "engine, 1 tokens",
        "engine, 4 tokens",
        "fused, 1 tokens",
        "fused, 4 tokens",
    ]
    assert all(us > 0 for us in timed.values())
    assert "| fused, 4 tokens |" in (tmp_path / "results.md").read_text()


def test_the_check_refuses_to_run_outside_the_interpreter(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process: the refusal is the script's parsing of its arguments, before it runs
    # anything, and a child's start of Python, torch and Triton cost ten times the check.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    with pytest.raises(SystemExit) as exited:
        importlib.import_module("rope_attention").main(["--check"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "TRITON_INTERPRET=1" in err, err
