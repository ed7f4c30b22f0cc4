"""How `perfgate profile` launches a server: the probe on, its phase marks where needed."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate import measure
from perfgate.config import load_config
from perfgate.errors import InfrastructureError
from perfgate.preflight import Preflight
from perfgate.probe import DIR_VARIABLE, RANGES_VARIABLE
from perfgate.profile import capture
from perfgate.profile.trace import load_trace
from perfgate.sglang import facts as sglang

from ..conftest import write_config


@pytest.mark.parametrize(("engine", "ranges"), [("embedded", None), ("sglang", "1")])
def test_only_sglang_servers_mark_phases_all_along(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, ranges: str | None
) -> None:
    # The embedded engine marks them for its profile only: the unprofiled cycles it compares
    # with must not pay for the marks.
    launched: dict[str, Any] = {}

    def no_server(command: Any, *args: Any, **kwargs: Any) -> Any:
        launched["env"] = command.env
        raise InfrastructureError("not launched in this test")

    monkeypatch.setattr(measure, "running_server", no_server)  # capture serves through it
    scenario = replace(load_config(write_config(tmp_path)).scenarios["tiny"], engine=engine)
    release = sglang.release(sglang.PINNED) if engine == "sglang" else None
    with pytest.raises(InfrastructureError, match="not launched"):
        capture.capture_profile(scenario, tmp_path / "work", checked=Preflight(release, None))
    assert launched["env"][DIR_VARIABLE] == str(tmp_path / "work" / "probe")
    assert launched["env"].get(RANGES_VARIABLE) == ranges


# SGLang's ranks each write their own trace (`<prefix>-<id>-TP-<rank>[-DP-..].trace.json.gz`),
# straight to its final name, after the profiled steps: rank 1's may be whole while rank 0's is
# not there yet, then half written.
TRACE_WRITER = """
import gzip, json, sys, time
from pathlib import Path
folder, events = Path(sys.argv[1]), json.loads(sys.argv[2])
whole = gzip.compress(json.dumps({"traceEvents": events}).encode())
(folder / "perfgate-1.5-TP-1.trace.json.gz").write_bytes(whole)
(folder / "rank-1-written").touch()
time.sleep(0.5)
with open(folder / "perfgate-1.5-TP-0.trace.json.gz", "wb") as trace:
    trace.write(whole[: len(whole) // 2]); trace.flush()
    time.sleep(1.5)
    trace.write(whole[len(whole) // 2 :])
"""


class _Profiling:
    """A client whose profile has already stopped: /stop_profile is not called for it."""

    def stop_profile(self) -> None:
        raise AssertionError("a trace was already on its way")


@pytest.mark.slow
def test_the_trace_taken_is_rank_0_s_and_whole(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    events = [{"name": f"op{i}", "ph": "X", "ts": i, "dur": 1} for i in range(2000)]
    with subprocess.Popen([sys.executable, "-c", TRACE_WRITER, str(tmp_path), json.dumps(events)]):
        for _ in range(600):  # at most a minute
            if (tmp_path / "rank-1-written").exists():
                break
            time.sleep(0.1)
        trace = capture.wait_for_trace(tmp_path, _Profiling(), timeout_s=60)  # type: ignore[arg-type]
        assert trace.name == "perfgate-1.5-TP-0.trace.json.gz"
        assert load_trace(trace) == events


def test_no_trace_of_rank_0_is_an_infrastructure_error_naming_what_was_found(
    tmp_path: Path,
) -> None:
    (tmp_path / "perfgate-1.5-TP-1.trace.json.gz").write_bytes(b"")
    with pytest.raises(InfrastructureError, match=r"no profiler trace of rank 0 .*TP-1"):
        capture.wait_for_trace(tmp_path, _Profiling(), timeout_s=0.2)  # type: ignore[arg-type]


def test_the_profilers_cost_is_rank_0s_cycles_only() -> None:
    from perfgate.measure import Repeat
    from perfgate.probe.reader import CycleRecord

    def cycle(rank: int, at: float, ms: float) -> CycleRecord:
        return CycleRecord("cycle", 100 + rank, int(at * 10), at, {"cycle": ms}, rank=rank)

    repeats = [Repeat(10.0, 11.0, 1.0, ()), Repeat(20.0, 21.0, 1.0, ())]
    # Rank 1's file is read first (its pid sorts first); it lags 40 ms behind rank 0 each cycle.
    rank_1 = [cycle(1, t, 50.0) for t in (10.1, 10.2, 20.1, 20.2, 30.1, 30.2)]
    rank_0 = [cycle(0, t, 10.0) for t in (10.1, 10.2, 20.1, 20.2)]
    rank_0 += [cycle(0, t, 12.0) for t in (30.1, 30.2)]
    window = {"started_at": 30.0, "stopped_at": 31.0}
    outside, inside = capture.compared_cycles(rank_1 + rank_0, window, repeats)
    assert capture.cycle_ms(inside) == (12.0, 12.0)
    assert capture.cycle_ms(outside) == (10.0, 10.0, 10.0, 10.0)


def test_each_phase_s_window_is_rank_0_s_median_over_the_compared_cycles() -> None:
    from perfgate.measure import Repeat
    from perfgate.probe.reader import CycleRecord

    def cycle(rank: int, at: float, draft: float, extend: float) -> CycleRecord:
        ms = {"cycle": draft + extend, "draft": draft, "draft_extend": extend}
        return CycleRecord("cycle", 100 + rank, int(at * 10), at, ms, rank=rank)

    repeats = [Repeat(10.0, 11.0, 1.0, ()), Repeat(20.0, 21.0, 1.0, ())]
    records = [cycle(1, t, 90.0, 90.0) for t in (10.1, 10.2, 20.1)]  # rank 1: never counted
    records += [cycle(0, 10.1, 1.0, 4.0), cycle(0, 10.2, 3.0, 2.0), cycle(0, 10.3, 50.0, 50.0)]
    records += [cycle(0, 20.1, 2.0, 6.0), cycle(0, 20.2, 2.0, 8.0)]
    records += [cycle(0, 30.1, 70.0, 70.0), cycle(0, 30.2, 70.0, 70.0)]  # profiled
    # The first two cycles of each repeat, as many as were profiled.
    outside, _ = capture.compared_cycles(records, {"started_at": 30.0, "stopped_at": 31.0}, repeats)
    windows = capture.phase_medians(outside)
    assert windows == {"cycle": 6.5, "draft": 2.0, "draft_extend": 5.0}
