"""Profile a few decode cycles inside a scenario's server, and what the profiler cost.

One server, launched with the probe as a gate run launches it: warm up, time the scenario's
repeats unprofiled, ask for a profile of the next ``cycles`` decode cycles through SGLang's
``/start_profile``, time one more repeat (the profile covers its first cycles), then read the
trace the server wrote and the probe's per-cycle records. The probe marks the phases in the
trace (see perfgate.probe.runtime) and tells the profiled cycles' times, so the profiler's own
cost is the profiled cycles' median time against that of the same cycles (the first
``cycles`` of a repeat, same batch, same lengths) in the unprofiled repeats.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.config import Scenario
from perfgate.engines.client import EngineClient
from perfgate.engines.launch import probed_command
from perfgate.engines.server_commands import Mode, ServerCommand
from perfgate.errors import InfrastructureError
from perfgate.measure import (
    Repeat,
    run_repeats,
    run_rounds,
    server_and_client,
    timed_repeat,
    warm_up,
)
from perfgate.preflight import Preflight, preflight
from perfgate.probe import RANGES_VARIABLE
from perfgate.probe.reader import CycleRecord, read_records, wait_until_complete
from perfgate.profile.trace import ProfileResult, load_trace, parse_spans, phase_breakdown
from perfgate.progress import SILENT, Reporter
from perfgate.spec.probe import EVERY_VARIABLE

# Rank 0's trace: SGLang names each `[prefix-]<id>-TP-<rank>[-DP-<r>][-PP-<r>][-EP-<r>]
# [-<STAGE>].trace.json.gz` (scheduler_profiler_mixin.py; profiler_manager.py from 0.5.13).
RANK_0 = re.compile(r"-TP-0(?:-(?:DP|PP|EP)-0)*(?:-[A-Z]+)?\.trace\.json(?:\.gz)?$")
TRACE_WAIT_S = 120.0  # SGLang writes its traces after the profiled steps, in the background
PROFILE_PREFIX = "perfgate"


def capture_profile(
    scenario: Scenario,
    workdir: Path,
    *,
    cycles: int = 5,
    mode: Mode = "spec",
    activities: Sequence[str] = ("CPU", "GPU"),
    checked: Preflight | None = None,
    progress: Reporter = SILENT,
) -> ProfileResult:
    """Launch the server, profile `cycles` decode cycles, and read what it wrote.

    `progress` shows the server's start, the repeats and the wait for the trace.
    """
    checked = checked or preflight(scenario)
    probe_dir, trace_dir = workdir / "probe", workdir / "trace"
    command = profiled_server(scenario, mode, probe_dir, checked)
    request = {
        "output_dir": str(trace_dir.resolve()),
        "num_steps": cycles,
        "activities": list(activities),
        "profile_prefix": PROFILE_PREFIX,
    }
    log_path = workdir / f"server-{mode}.log"
    with server_and_client(scenario, command, log_path, checked, progress) as (server, client):
        command = server.command  # on another port, had its first been taken meanwhile
        info = client.server_info()
        repeats, trace = _repeats_then_profile(client, scenario, mode, request, probe_dir, progress)
    window = read_window(trace)
    records = read_records(probe_dir)
    outside, inside = compared_cycles(records, window, repeats)
    return ProfileResult(
        scenario=scenario.name,
        mode=mode,
        command=command.shell(),
        server_info=info,
        trace_path=trace,
        window=window,
        breakdown=phase_breakdown(parse_spans(load_trace(trace))),
        tok_s=tuple(_tok_s(r) for r in repeats),
        cycle_ms_outside=cycle_ms(outside),
        cycle_ms_inside=cycle_ms(inside),
        phase_ms_outside=phase_medians(outside),
    )


def compared_cycles(
    records: Sequence[CycleRecord], window: dict[str, Any], repeats: Sequence[Repeat]
) -> tuple[list[CycleRecord], list[CycleRecord]]:
    """The cycles the profiler's cost compares: the first cycles of each unprofiled repeat,
    as many as were profiled, and the profiled ones (those inside `window`).

    Rank 0's only, as the trace is: on a tensor-parallel server every rank writes its own
    records of the same cycles, and another rank's would be counted again, or first.
    """
    cycles = [r for r in records if r.kind == metrics.CYCLE and r.rank == 0]
    inside = _in_window(cycles, window)
    return _first_cycles(cycles, repeats, len(inside)), inside


def cycle_ms(cycles: Sequence[CycleRecord]) -> tuple[float, ...]:
    """Each cycle's whole time, ms."""
    return tuple(r.ms[metrics.CYCLE] for r in cycles)


def phase_medians(cycles: Sequence[CycleRecord]) -> dict[str, float]:
    """Per phase, the probe's median milliseconds over `cycles`: given the unprofiled ones
    the profiler's cost compares with, each phase's window, timed unprofiled.

    Beside the trace's work in the same phase it says how busy the device was inside the
    window: a phase whose kernels fill little of its window waits on the host.
    """
    phases = sorted({phase for r in cycles for phase in r.ms})
    return {
        phase: statistics.median(r.ms[phase] for r in cycles if phase in r.ms) for phase in phases
    }


def profiled_server(
    scenario: Scenario, mode: Mode, probe_dir: Path, checked: Preflight
) -> ServerCommand:
    """The server's command: the probe on, and its phase marks on where the engine's own
    profiler runs without perfgate's say. Every cycle is timed, on a GPU too.

    SGLang starts its profiler itself, so the probe marks the phases all along there. The
    embedded engine turns the marks on for its profile only: the unprofiled cycles the
    profiled ones are compared with then carry none of their cost.
    """
    env = {EVERY_VARIABLE: "1"}  # every cycle timed: the profiled ones and those compared with them
    if scenario.engine != "embedded":
        env[RANGES_VARIABLE] = "1"
    return probed_command(scenario, mode, probe_dir, checked.sglang, env)


def _repeats_then_profile(
    client: EngineClient,
    scenario: Scenario,
    mode: Mode,
    request: dict[str, Any],
    probe_dir: Path,
    progress: Reporter,
) -> tuple[list[Repeat], Path]:
    """Warm up, time the unprofiled repeats, then one repeat whose first cycles are profiled."""
    warm_up(client, scenario, mode, progress)
    repeats = run_repeats(client, scenario, mode, run_rounds, progress)
    with progress.step(f"{scenario.name} {mode}: profiled repeat and its trace"):
        client.start_profile(request)
        profiled = timed_repeat(client, scenario)
        trace = wait_for_trace(Path(request["output_dir"]), client)
    wait_until_complete(probe_dir, profiled.finished_at)
    return repeats, trace


def wait_for_trace(
    trace_dir: Path, client: EngineClient, timeout_s: float = TRACE_WAIT_S, poll_s: float = 0.5
) -> Path:
    """Rank 0's trace, once the server has written it whole; asks the server to stop
    profiling if no trace is there yet.

    The embedded engine writes its trace before the request that held the profile returns;
    SGLang writes one per rank after the profiled steps (or on /stop_profile if the steps ran
    out), straight to its final name. So a trace is taken once it is rank 0's, its size did
    not change between two looks, and it reads whole (the gzip stream and the JSON).
    """
    if not _traces(trace_dir):
        client.stop_profile()
    deadline = time.monotonic() + timeout_s
    last_size = None
    while True:
        trace = next((p for p in _traces(trace_dir) if RANK_0.search(p.name)), None)
        size = _size(trace)
        if trace is not None and size == last_size and _whole(trace):
            return trace
        last_size = size
        if time.monotonic() >= deadline:
            found = ", ".join(p.name for p in _traces(trace_dir)) or "none"
            raise InfrastructureError(
                f"the server wrote no profiler trace of rank 0 into {trace_dir} within "
                f"{timeout_s:g} s (traces found: {found}); its log says why"
            )
        time.sleep(poll_s)


def _size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None


def _whole(trace: Path) -> bool:
    try:
        load_trace(trace)
    except InfrastructureError:
        return False
    return True


def _traces(trace_dir: Path) -> list[Path]:
    if not trace_dir.is_dir():
        return []
    return sorted(trace_dir.glob("*.trace.json*"))


def read_window(trace: Path) -> dict[str, Any]:
    """The window file the embedded engine writes beside its trace; empty if there is none."""
    stem = trace.name.split("-TP-")[0]
    path = trace.with_name(f"{stem}.window.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def _in_window(records: Sequence[CycleRecord], window: dict[str, Any]) -> list[CycleRecord]:
    if not window:
        return []
    start, stop = window["started_at"], window["stopped_at"]
    return [r for r in records if start <= r.started_at <= stop]


def _first_cycles(
    records: Sequence[CycleRecord], repeats: Sequence[Repeat], count: int
) -> list[CycleRecord]:
    """The first `count` cycles of each repeat."""
    first: list[CycleRecord] = []
    for repeat in repeats:
        window = [r for r in records if repeat.started_at <= r.started_at <= repeat.finished_at]
        first += window[:count]
    return first


def _tok_s(repeat: Repeat) -> float:
    return sum(c.completion_tokens for c in repeat.completions) / repeat.elapsed_s
