"""benchmarks/launch_states.py times a decode step in fresh processes, on the CPU here."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import perfgate

from ..hang import HANG_S
from .common import server_env

SCRIPT = Path(perfgate.__file__).resolve().parents[1] / "benchmarks" / "launch_states.py"

pytestmark = pytest.mark.slow


def test_each_launch_is_a_process_of_its_own_with_both_ways_timed(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--device", "cpu",
               "--model", "perfgate/llama-tiny", "--launches", "2", "--replays", "2",
               "--blocks", "2", "--eager", "--prefill-tokens", "8", "--prefills", "2"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=server_env())
    assert done.returncode == 0, done.stdout + done.stderr
    launches = json.loads((tmp_path / "results.json").read_text())["launches"]
    assert [row["compiled_layers"] for row in launches] == [0, 0]  # --eager: nothing compiled
    assert len(launches) == 2 and launches[0]["pid"] != launches[1]["pid"]
    for row in launches:
        assert row["device_ms"] > 0 and row["served_ms"] > 0 and row["allowed_cpus"] >= 1
        assert row["sm_clock_mhz"] is None  # no GPU to read here
        # The prefill, timed as served and as the host's queueing; the GPU's time alone only
        # where there is a GPU to queue behind.
        assert row["prefill_served_ms"] > 0 and row["prefill_enqueue_ms"] > 0
        assert row["prefill_gpu_ms"] is None and row["prefill_tokens"] == 8
        assert row["prefill_graph_ms"] is None  # a replayed graph only on CUDA
    table = (tmp_path / "results.md").read_text()
    assert "| 2 |" in table and "| served |" in table and "| device |" in table
    assert "eager (--eager)" in table  # the record says how the target was built
    assert "| prefill_served |" in table and "Prefill: 8 tokens a prompt" in table
    assert "r with the prefill's enqueue" in table
    # --render measures nothing: it prints the tables of the results.json it is given.
    rendered = subprocess.run([sys.executable, str(SCRIPT), "--render", str(tmp_path / "results.json")],
                              capture_output=True, text=True, timeout=HANG_S, env=server_env())  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == table
    assert "not timed" not in table and launches[0]["prefill_graph_error"] is None
    # A capture the GPU refused is said in the record, the other ways kept.
    sys.path.insert(0, str(SCRIPT.parent))
    results = json.loads((tmp_path / "results.json").read_text())
    results["launches"][1]["prefill_graph_error"] = "CUDA error: operation not permitted"
    refused = importlib.import_module("launch_states").render(results)
    assert "The prefill from a graph was not timed: CUDA error: operation not permitted" in refused
    assert "| prefill_served |" in refused


def test_the_record_says_how_many_layers_each_launch_compiled() -> None:
    """The GPU record's launches compile (the default); the header says so from what the
    children report, not from the flag."""
    sys.path.insert(0, str(SCRIPT.parent))
    launch_states = importlib.import_module("launch_states")
    assert launch_states._built([{"compiled_layers": 0}] * 2) == "eager (--eager)"
    assert launch_states._built([{"compiled_layers": 5}] * 2) == "5 layers compiled"
    # A launch that compiled less than another is shown, not hidden behind the first.
    mixed = [{"compiled_layers": 5}, {"compiled_layers": 0}]
    assert launch_states._built(mixed) == "0, 5 layers compiled"


def test_each_probe_is_set_against_the_step_s_host_share_and_the_prefill_s_enqueue() -> None:
    """The probe table gives r with each: a probe that follows the prefill's enqueue and not
    the step's host share shows +1.00 in the one column and its own r in the other."""
    sys.path.insert(0, str(SCRIPT.parent))
    launch_states = importlib.import_module("launch_states")
    rows = [
        {"served_ms": 1.40 + host, "device_ms": 1.40, "prefill_enqueue_ms": 2.0 * loop / 1000,
         "python_loop_us": loop, "cpu": 3}
        for host, loop in [(0.03, 1800.0), (0.05, 3100.0), (0.04, 1700.0), (0.03, 3300.0)]
    ]  # fmt: skip
    table = launch_states._probes_against_host(rows)
    assert table[1] == "| probe | r with served - device | r with the prefill's enqueue | values |"
    loop_row = next(line for line in table if line.startswith("| python_loop_us |"))
    assert loop_row.split(" | ")[2] == "+1.00"  # the enqueue follows the loop exactly
    assert loop_row.split(" | ")[1] not in ("+1.00", "-")
    assert "| cpu | - | - |" in "\n".join(table)  # a flat probe has no r
    # Without a timed prefill (an older record), only the step's column.
    without = [{k: v for k, v in row.items() if k != "prefill_enqueue_ms"} for row in rows]
    assert "prefill" not in launch_states._probes_against_host(without)[1]


def test_the_replayed_prefill_passes_its_tokens_through_the_graph_s_buffers() -> None:
    """The fourth way (CUDA only) replays the prefill from a graph whose input is the prompts'
    tokens: emulated here, its forward reads the buffer the tokens were copied into."""
    sys.path.insert(0, str(SCRIPT.parent))
    launch_states = importlib.import_module("launch_states")
    ids = torch.arange(12).reshape(3, 4)
    seen: list[torch.Tensor] = []

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        seen.append(tokens)
        return tokens.sum(dim=1)

    times = launch_states._replayed_prefills(forward, ids, 3, "emulate")
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert seen and all(t is not ids and torch.equal(t, ids) for t in seen)  # the buffer's copy
