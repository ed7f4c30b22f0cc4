"""The probe's phase ranges: named record_function ranges while a profiler wants them, only then."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from perfgate import metrics
from perfgate.probe import RANGES_VARIABLE, runtime
from perfgate.probe.targets import ProbeTarget


class Worker:
    def cycle(self) -> None:
        self.draft()
        self.verify()

    def draft(self) -> None:
        torch.ones(4).sum()

    def verify(self) -> None:
        torch.ones(8) @ torch.ones(8)


TARGETS = [
    ProbeTarget(__name__, "Worker", "cycle", metrics.CYCLE),
    ProbeTarget(__name__, "Worker", "draft", metrics.DRAFT),
    ProbeTarget(__name__, "Worker", "verify", metrics.VERIFY),
]


@pytest.fixture
def probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setattr(runtime, "_out_dir", tmp_path)
    monkeypatch.setattr(runtime, "_probe", None)
    monkeypatch.setattr(runtime, "_ranges", None)
    for target in TARGETS:
        monkeypatch.setattr(Worker, target.method, Worker.__dict__[target.method])
    runtime.patch_class(sys.modules[__name__], TARGETS)
    yield Worker()
    if runtime._probe is not None:
        runtime._probe.close()


def ranges_seen(worker: Worker) -> list[str]:
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with profiler:
        worker.cycle()
    wanted = set(metrics.PROBED_PHASES)
    return [event.name for event in profiler.events() if event.name in wanted]


def test_phases_are_ranges_while_marking_is_on(probed: Worker) -> None:
    runtime.set_phase_ranges(True)
    assert runtime.phase_ranges_on()
    assert sorted(ranges_seen(probed)) == ["cycle", "draft", "verify"]


def test_no_range_is_made_while_marking_is_off(
    probed: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    monkeypatch.setattr(runtime.PhaseRanges, "run", lambda *a, **k: made.append("called"))
    assert not runtime.phase_ranges_on()
    assert ranges_seen(probed) == []
    assert made == []  # the hot path never reached the range helper


def test_the_variable_turns_marking_on_for_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_out_dir", None)
    monkeypatch.setattr(runtime, "_ranges", None)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(runtime, "patch_class", lambda *args: [])  # this process stays as it is
    runtime.activate({runtime.DIR_VARIABLE: str(tmp_path), RANGES_VARIABLE: "1"})
    assert runtime.phase_ranges_on()
    runtime.set_phase_ranges(False)
    assert not runtime.phase_ranges_on()
