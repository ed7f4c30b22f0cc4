"""benchmarks/folded_configs.py times the folded step under each kernel configuration, on the
CPU here under Triton's interpreter."""

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

SCRIPT = Path(perfgate.__file__).resolve().parents[1] / "benchmarks" / "folded_configs.py"

pytestmark = pytest.mark.slow


def test_every_configuration_is_timed_for_decode_and_verify(tmp_path: Path) -> None:
    # On one thread, as the engine's CPU servers run: two on a shared 2-core CPU only wait on
    # each other.
    env = {**server_env(), "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    # The interpreter takes about 0.3 s a forward: one sequence, a verify of 2 tokens, and one
    # timed call of each, no warm-up, for each of the 7 configurations (the times are not
    # what this checks). Eager: compiling the folded layers cost 16 of the run's 25 CPU s on
    # an empty Inductor cache, and tests/embedded/test_folded_norms.py checks what they
    # compute compiled.
    # Through interpreter_waste: the same script and numbers, without two costs of the interpreter.
    command = [sys.executable, "-m", "tests.embedded.interpreter_waste", str(SCRIPT),
               "--out", str(tmp_path), "--device", "cpu",
               "--model", "perfgate/llama-tiny", "--batch", "1", "--position", "3",
               "--verify-tokens", "2", "--replays", "1", "--blocks", "1", "--warmups", "0",
               "--eager"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    timed = json.loads((tmp_path / "results.json").read_text())["ms"]
    assert "BLOCK_F 512, warps 4" in timed and len(timed) == 7
    assert all(decode > 0 and verify > 0 for decode, verify in timed.values())
    table = (tmp_path / "results.md").read_text()
    assert "| BLOCK_F 2048, warps 4 |" in table
    assert "eager (--eager), the layers not compiled." in table  # the record says which way


def test_the_cpu_needs_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process: the refusal is the script's parsing of its arguments, before it runs
    # anything, and a child's start of Python and torch cost ten times the check.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--out", str(tmp_path), "--device", "cpu"])
    with pytest.raises(SystemExit) as exited:
        importlib.import_module("folded_configs").main()
    assert exited.value.code == 2 and "TRITON_INTERPRET=1" in capsys.readouterr().err
