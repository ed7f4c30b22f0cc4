"""Measure the profiled speculative server: a sweep point, and what the plan needs besides.

The server is measured as any sweep point is (perfgate.measure.measure_mode: warm-up, timed
repeats, the probe), and two things are kept besides its result: every probe record of the
server, and the wall-clock window of each timed repeat, which tells its cycles from the
warm-up's and the other requests' (perfgate.plan.observe).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.config import Scenario
from perfgate.measure import TimedLoop, measure_mode, run_rounds
from perfgate.pipeline import MeasureMode
from perfgate.plan.observe import Window
from perfgate.probe.reader import CycleRecord
from perfgate.results import ModeResult


def batch_sequences(scenario: Scenario) -> int:
    """How many sequences decode together in one repeat: the prompts, at most the server's
    running requests."""
    cap = scenario.max_running_requests
    return min(len(scenario.prompts), cap) if cap else len(scenario.prompts)


@dataclass(frozen=True)
class Profiled:
    """What the plan keeps of a profiled server besides its result."""

    records: tuple[CycleRecord, ...]
    repeat_windows: tuple[Window, ...]


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
        loop = windowed(timed_loop, windows)
        result = self.measure(
            scenario, mode, workdir, loop, checked, on_records=records.extend, **options
        )
        self.profiled[workdir] = Profiled(tuple(records), tuple(windows))
        return result


def windowed(timed_loop: TimedLoop, windows: list[Window]) -> TimedLoop:
    """`timed_loop`, noting the wall-clock window of each repeat it runs in `windows`."""

    def loop(one_repeat: Callable[[], None], rounds: int) -> None:
        def noted() -> None:
            started = time.time()
            one_repeat()
            windows.append((started, time.time()))

        timed_loop(noted, rounds)

    return loop
