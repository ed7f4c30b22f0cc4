"""The probe: phases charged to the right cycle, written off the hot path, read back whole."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from perfgate import metrics
from perfgate.probe import reader, runtime
from perfgate.probe.targets import ProbeTarget


class Worker:
    def cycle(self, sleeps: dict[str, float]) -> None:
        self.draft(sleeps["draft"])
        self.verify(sleeps["verify"])
        time.sleep(sleeps["gap"])  # unnamed work: `other`

    def draft(self, seconds: float) -> None:
        time.sleep(seconds)

    def verify(self, seconds: float) -> None:
        time.sleep(seconds)

    def prefill(self) -> None:
        self.draft(0.001)  # a phase method outside a cycle belongs to prefill


TARGETS = [
    ProbeTarget(__name__, "Worker", "cycle", metrics.CYCLE),
    ProbeTarget(__name__, "Worker", "draft", metrics.DRAFT),
    ProbeTarget(__name__, "Worker", "verify", metrics.VERIFY),
    ProbeTarget(__name__, "Worker", "prefill", metrics.PREFILL),
]


@pytest.fixture
def probe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runtime, "_out_dir", tmp_path)
    monkeypatch.setattr(runtime, "_probe", None)
    for target in TARGETS:
        monkeypatch.setattr(Worker, target.method, getattr(Worker, target.method))
    yield tmp_path
    if runtime._probe is not None:
        runtime._probe.close()


def test_phases_are_timed_per_cycle(probe_dir: Path) -> None:
    wrapped = runtime.patch_class(sys.modules[__name__], TARGETS)
    assert len(wrapped) == 4
    worker = Worker()
    worker.prefill()
    started = time.time()
    for _ in range(3):
        worker.cycle({"draft": 0.002, "verify": 0.01, "gap": 0.004})
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=5)
    records = reader.read_records(probe_dir)
    cycles = [r for r in records if r.kind == "cycle"]
    prefills = [r for r in records if r.kind == "prefill"]
    assert len(cycles) == 3 and len(prefills) == 1
    assert all(r.started_at >= started for r in cycles)
    for record in cycles:
        assert set(record.ms) == {"draft", "verify", "cycle"}
        assert record.ms["verify"] >= 10.0
        assert record.ms["draft"] >= 2.0
        assert record.ms["cycle"] >= record.ms["draft"] + record.ms["verify"] + 4.0


def test_patching_twice_wraps_once(probe_dir: Path) -> None:
    runtime.patch_class(sys.modules[__name__], TARGETS)
    assert runtime.patch_class(sys.modules[__name__], TARGETS) == []


def test_reader_waits_for_a_heartbeat_after_the_moment(tmp_path: Path) -> None:
    (tmp_path / "probe-1.jsonl").write_text('{"kind": "flushed", "t": 10.0, "pending": 0}\n')
    reader.wait_until_complete(tmp_path, 9.0, timeout_s=1)
    from perfgate.errors import InfrastructureError

    with pytest.raises(InfrastructureError, match="did not catch up"):
        reader.wait_until_complete(tmp_path, 11.0, timeout_s=0.2)


def test_activation_needs_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_out_dir", None)
    assert runtime.activate({}) is False
    with pytest.raises(LookupError, match="no probe target table for 'nope'"):
        runtime.activate({runtime.DIR_VARIABLE: "/tmp/x", runtime.TABLE_VARIABLE: "nope"})
