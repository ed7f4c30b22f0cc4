"""Measure the profiled speculative server: a sweep point, and what the plan needs besides.

The server is measured as any sweep point is (perfgate.measure.measure_mode: warm-up, timed
repeats, the probe), and two things are kept besides its result: every probe record of the
server, and the wall-clock window of each timed repeat, which tells its cycles from the
warm-up's and the other requests' (perfgate.plan.observe).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.config import Scenario
from perfgate.engines.client import EngineClient
from perfgate.measure import TimedLoop, WhileUp, measure_mode, run_rounds
from perfgate.pipeline import MeasureMode
from perfgate.plan.observe import Window
from perfgate.probe.reader import CycleRecord
from perfgate.results import ModeResult


def batch_sequences(scenario: Scenario) -> int:
    """How many sequences decode together in one repeat: the prompts, at most the server's
    running requests."""
    cap = scenario.max_running_requests
    return min(len(scenario.prompts), cap) if cap else len(scenario.prompts)


# The chain width (tokens a sequence) an embedded profiled server also times its verify
# forward at, besides its own: a chain of one step, the narrowest a plan predicts.
TIMED_WIDTH = 2
WIDTHS_FLAG = "--debug-time-verify-widths"


@dataclass(frozen=True)
class Profiled:
    """What the plan keeps of a profiled server besides its result."""

    records: tuple[CycleRecord, ...]
    repeat_windows: tuple[Window, ...]
    verify_ms_by_width: dict[int, float] = field(default_factory=dict)


@dataclass
class ProfilingLaunch:
    """The sweep's MeasureMode for a plan: a speculative server at `steps` is profiled (the
    module doc), every other server measured as a sweep measures it.

    `profiled` holds, per server folder, what each profiled server gave.
    """

    steps: int
    measure: MeasureMode = measure_mode
    profiled: dict[Path, Profiled] = field(default_factory=dict)

    def __call__(
        self,
        scenario: Scenario,
        mode: str,
        workdir: Path,
        timed_loop: TimedLoop = run_rounds,
        checked: Any = None,
        **options: Any,
    ) -> ModeResult:
        if mode != "spec" or scenario.steps != self.steps:
            return self.measure(scenario, mode, workdir, timed_loop, checked, **options)
        windows: list[Window] = []
        records: list[CycleRecord] = []
        widths: dict[int, float] = {}
        loop = windowed(timed_loop, windows)
        if times_verify_widths(scenario):
            if WIDTHS_FLAG not in scenario.spec_extra_args:  # else the widths it names
                flags = (*scenario.spec_extra_args, WIDTHS_FLAG, str(TIMED_WIDTH))
                scenario = replace(scenario, spec_extra_args=flags)
            options["while_up"] = read_widths(widths, options.get("while_up"))
        result = self.measure(
            scenario, mode, workdir, loop, checked, on_records=records.extend, **options
        )
        self.profiled[workdir] = Profiled(tuple(records), tuple(windows), widths)
        return result


def times_verify_widths(scenario: Scenario) -> bool:
    """Whether the profiled server can time its verify at a second width: the embedded
    engine's chain on one rank, after a warm-up batch (the timing runs after the first batch
    the client sends, which must not be a timed repeat)."""
    return (
        scenario.engine == "embedded"
        and scenario.topk == 1
        and scenario.tp == 1
        and scenario.warmup > 0
    )


def read_widths(into: dict[int, float], then: WhileUp | None) -> WhileUp:
    """A `while_up` that reads the server's verify timings into `into`, then runs `then`."""

    def read(client: EngineClient, outputs: Any) -> None:
        states = client.server_info().get("internal_states") or [{}]
        timed = states[0].get("verify_ms_by_width") or {}
        into.update({int(w): float(ms) for w, ms in timed.items()})
        if then is not None:
            then(client, outputs)

    return read


def windowed(timed_loop: TimedLoop, windows: list[Window]) -> TimedLoop:
    """`timed_loop`, noting the wall-clock window of each repeat it runs in `windows`."""

    def loop(one_repeat: Callable[[], None], rounds: int) -> None:
        def noted() -> None:
            started = time.time()
            one_repeat()
            windows.append((started, time.time()))

        timed_loop(noted, rounds)

    return loop
