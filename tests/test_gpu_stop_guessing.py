"""benchmarks/gpu_stop_guessing.sh, the GPU run, end to end on the CPU (--smoke), and the
probe switch it measures: a server launched without the probe."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.measure import measure_mode

from .conftest import REPO, TINY_SCENARIO, write_config
from .hang import HANG_S

SCRIPT = REPO / "benchmarks" / "gpu_stop_guessing.sh"
FILES = [
    "probe-overhead.json",
    "probe-overhead.md",
    "profile/profile.json",
    "profile/profile.md",
    "profile/trace.json.gz",
    "run.log",
    "sweep.json",
    "sweep.md",
]


def _benchmark_main(module: str) -> Callable[[list[str]], int]:
    """A script of benchmarks/ to run in this process: its main, imported from there."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        main: Callable[[list[str]], int] = importlib.import_module(module).main
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return main


@pytest.mark.slow
def test_the_smoke_run_writes_every_table_and_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    env.pop("PERFGATE_DB_URL", None)
    done = subprocess.run(
        ["bash", str(SCRIPT), "--smoke", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == FILES
    assert all((out / f).stat().st_size <= 16 << 20 for f in FILES)
    overhead = json.loads((out / "probe-overhead.json").read_text())
    assert len(overhead["pairs"]) == 5 and [p["first"] for p in overhead["pairs"]] == [
        "on",
        "off",
        "on",
        "off",
        "on",
    ]
    assert overhead["how"] == "process" and overhead["every"] == 1  # the CPU clock: every cycle
    assert all(p["cycles_timed"] > 0 for p in overhead["pairs"])
    assert overhead["ratio_low"] < overhead["ratio"] < overhead["ratio_high"]
    assert overhead["goal_status"] in ("met", "not shown", "missed")
    sweep = json.loads((out / "sweep.json").read_text())
    assert [(p["steps"], p["equivalent"]) for p in sweep["points"]] == [(1, False), (2, False)]
    # Simulated acceptance: outputs differ by design, compared but not gated, so a best exists.
    assert sweep["best"] == sweep["fastest"] and sweep["best"] is not None
    assert all(p["verify_ms"] > 0 and p["accept_length"] > 1 for p in sweep["points"])
    profile = json.loads((out / "profile" / "profile.json").read_text())
    assert profile["phases"]["verify"]["count"] > 0 and profile["cycles"] == 3
    log = (out / "run.log").read_text()
    assert "== sweep: exit 0" in log and "== probe overhead: exit 0" in log
    assert "== probe overhead, every cycle timed: exit 0" in log
    assert log.rstrip().endswith("done, exit 0")
    assert list(tmp_path.glob("stop-guessing.*")) == []  # the work folder is removed
    # Nothing in the record names this machine's folders; the trace's own path is relative.
    for name in FILES:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(out / name, "rt", encoding="utf-8") as handle:
            text = handle.read()
        assert str(tmp_path) not in text and str(REPO) not in text, name
    assert "PYTHONPATH=./perfgate/probe/boot" in profile["command"]


@pytest.mark.slow
def test_a_server_launched_without_the_probe_has_no_phases(tmp_path: Path) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    result = measure_mode(scenario, "spec", tmp_path / "work", probe=False)
    assert result.phases == () and "verify_ms" not in result.samples
    assert result.samples["output_tok_s"] and result.samples["accept_length"]
    assert result.command.startswith("PERFGATE_PROBE_DIR='' ")
    assert "perfgate/probe/boot" not in result.command
    assert not (tmp_path / "work" / "probe-spec").exists()


@pytest.mark.slow
def test_the_probe_s_cost_between_fresh_launches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The way that works for any engine: fresh servers, the probe on in every other one. The
    # benchmark runs in this process (its servers are processes of their own, as ever): a
    # process of its own only imported perfgate again. One repeat a launch: each pair's two
    # launches are what the table is made of.
    config = write_config(tmp_path)
    main = _benchmark_main("probe_overhead")
    code = main(["--config", str(config), "--scenario", "tiny", "--how", "launches",
                 "--pairs", "2", "--repeats", "1", "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    overhead = json.loads((tmp_path / "out" / "probe-overhead.json").read_text())
    assert overhead["how"] == "launches" and len(overhead["pairs"]) == 2
    assert "fresh server launches" in (tmp_path / "out" / "probe-overhead.md").read_text()


def test_switching_the_probe_in_process_needs_the_embedded_engine(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, TINY_SCENARIO.replace('engine = "embedded"', 'engine = "sglang"')
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "probe_overhead.py"), "--config", str(config),
         "--scenario", "tiny", "--how", "process", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 64
    assert "--how process needs the embedded engine, not 'sglang'; use --how launches" in (
        done.stderr
    )
    assert not (tmp_path / "out").exists()


def test_a_record_names_paths_portably_longest_first(tmp_path: Path) -> None:
    main = _benchmark_main("portable_paths")
    record = tmp_path / "out" / "r.json"
    record.parent.mkdir()
    record.write_text(f"{tmp_path}/out/probe {tmp_path}/x {REPO}/perfgate {sys.executable} -m")
    trace = tmp_path / "out" / "t.json.gz"
    with gzip.open(trace, "wt") as handle:
        handle.write(f'{{"traceName": "{tmp_path}/out/t.json"}}')
    main(["--replace", f"{tmp_path}=WORK", "--replace", f"{tmp_path}/out=OUT", str(record),
          str(trace)])  # fmt: skip
    assert record.read_text() == "OUT/probe WORK/x ./perfgate python3 -m"
    with gzip.open(trace, "rt") as handle:
        assert handle.read() == '{"traceName": "OUT/t.json"}'
