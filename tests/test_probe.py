"""The probe: phases charged to the right cycle, written off the hot path, read back whole."""

from __future__ import annotations

import sys
import threading
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


# --- SGLang's shape: verify nested in the accept method, prefill told apart by the batch ----


class Mode:
    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode


class Batch:
    def __init__(self, decode: bool) -> None:
        self.forward_mode = Mode(decode)


class SpecWorker:
    """Like EAGLEWorkerV2: verify() runs the target forward, then samples and commits."""

    def forward_batch_generation(self, batch: Batch) -> None:
        if not batch.forward_mode.is_decode():
            self.target_forward(0.004)  # prefill: not a verify phase
            return
        self.draft(0.002)
        self.verify(0.010)
        time.sleep(0.003)  # other

    def draft(self, seconds: float) -> None:
        time.sleep(seconds)

    def verify(self, seconds: float) -> None:
        self.target_forward(seconds)
        time.sleep(0.005)  # sampling and acceptance: the accept phase's own time

    def target_forward(self, seconds: float) -> None:
        time.sleep(seconds)


SPEC_TARGETS = [
    ProbeTarget(
        __name__, "SpecWorker", "forward_batch_generation", metrics.CYCLE, "forward_mode.is_decode"
    ),
    ProbeTarget(__name__, "SpecWorker", "draft", metrics.DRAFT),
    ProbeTarget(__name__, "SpecWorker", "verify", metrics.ACCEPT),
    ProbeTarget(__name__, "SpecWorker", "target_forward", metrics.VERIFY),
]


@pytest.fixture
def spec_probe(probe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for target in SPEC_TARGETS:
        monkeypatch.setattr(SpecWorker, target.method, SpecWorker.__dict__[target.method])
    runtime.patch_class(sys.modules[__name__], SPEC_TARGETS)
    return probe_dir


def test_a_nested_phase_is_not_counted_twice(spec_probe: Path) -> None:
    worker = SpecWorker()
    worker.forward_batch_generation(Batch(decode=False))
    for _ in range(2):
        worker.forward_batch_generation(Batch(decode=True))
    reader.wait_until_complete(spec_probe, time.time(), timeout_s=5)
    records = reader.read_records(spec_probe)
    prefill, *cycles = records
    assert prefill.kind == "prefill" and set(prefill.ms) == {"prefill"}  # no verify in prefill
    assert prefill.ms["prefill"] >= 4.0
    for cycle in cycles:
        assert cycle.kind == "cycle"
        assert cycle.ms["verify"] >= 10.0
        assert cycle.ms["accept"] >= 5.0
        # Sleeps only overshoot, so only lower bounds are certain. Counted twice, verify's
        # 10 ms would push the named phases past the cycle minus its 3 ms of `other`.
        named = cycle.ms["draft"] + cycle.ms["verify"] + cycle.ms["accept"]
        assert cycle.ms["cycle"] >= named + 3.0


def test_phases_of_each_thread_stay_in_its_cycles(spec_probe: Path) -> None:
    workers = [
        threading.Thread(target=SpecWorker().forward_batch_generation, args=(Batch(True),))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    reader.wait_until_complete(spec_probe, time.time(), timeout_s=5)
    cycles = [r for r in reader.read_records(spec_probe) if r.kind == "cycle"]
    assert len(cycles) == 3
    for c in cycles:
        assert c.ms["verify"] >= 10.0 and c.ms["accept"] >= 5.0
        assert c.ms["cycle"] >= c.ms["draft"] + c.ms["verify"] + c.ms["accept"] + 3.0


def test_targets_are_chosen_by_release_and_mode() -> None:
    from perfgate.probe.targets import select_targets

    def names(version: str, mode: str) -> set[str]:
        return {
            f"{t.qualname}.{t.method}:{t.phase}" for t in select_targets("sglang", version, mode)
        }

    old, new = names("0.5.12.post1", "spec"), names("0.5.13", "spec")
    assert "EAGLEWorker.forward_draft_extend_after_decode:draft_extend" in old
    assert not any(n.startswith("EAGLEWorker.") for n in new)
    assert "EagleDraftWorker._draft_extend_for_decode:draft_extend" in new
    assert "TpModelWorker.forward_batch_generation:verify" in new
    assert names("0.5.23", "plain") == {"TpModelWorker.forward_batch_generation:cycle"}
    with pytest.raises(LookupError, match="needs the engine's version"):
        select_targets("sglang", None, "spec")
    with pytest.raises(LookupError, match="needs the server's mode"):
        select_targets("sglang", "0.5.23", None)
    with pytest.raises(LookupError, match=r"no probe targets in 'sglang' for release 0\.4\.6"):
        select_targets("sglang", "0.4.6", "spec")


def test_the_file_of_an_ended_process_is_complete(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (tmp_path / f"probe-{done.stdout.strip()}.jsonl").write_text(
        '{"kind": "flushed", "t": 1.0, "pending": 3}\n'
    )
    reader.wait_until_complete(tmp_path, time.time(), timeout_s=1)


def test_the_server_s_probe_variables() -> None:
    from perfgate.probe import probe_env

    env = probe_env(Path("/tmp/p"), "sglang", {}, engine_version="0.5.23", mode="spec")
    assert env["PERFGATE_PROBE_ENGINE_VERSION"] == "0.5.23" and env["PERFGATE_PROBE_MODE"] == "spec"
    assert env["PYTHONPATH"].endswith("boot")


def test_a_stride_times_one_cycle_in_every_and_sums_scale_back(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_every", 3)
    runtime.patch_class(sys.modules[__name__], TARGETS)
    worker = Worker()
    worker.prefill()
    started = time.time()
    for _ in range(9):
        worker.cycle({"draft": 0.001, "verify": 0.002, "gap": 0.0})
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=5)
    records = reader.read_records(probe_dir)
    cycles = [r for r in records if r.kind == "cycle"]
    (prefill,) = [r for r in records if r.kind == "prefill"]
    assert len(cycles) == 3 and {r.every for r in cycles} == {3}
    assert prefill.every == 1  # a prefill is always timed
    (totals,) = reader.phase_totals_by_pid(records, started, time.time()).values()
    assert totals["verify"] == pytest.approx(3 * sum(r.ms["verify"] for r in cycles))
    assert totals["verify"] >= 9 * 2.0  # the nine cycles' verify, though three were timed


def test_while_a_profiler_records_every_cycle_is_timed(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_every", 4)
    runtime.patch_class(sys.modules[__name__], TARGETS)
    runtime.set_phase_ranges(True)
    try:
        for _ in range(5):
            Worker().cycle({"draft": 0.0, "verify": 0.0, "gap": 0.0})
    finally:
        runtime.set_phase_ranges(False)
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=5)
    cycles = [r for r in reader.read_records(probe_dir) if r.kind == "cycle"]
    assert len(cycles) == 5 and {r.every for r in cycles} == {1}


class _FakeDeviceClock:
    """Marks that finish when told to, counting the queries and the marks ever created."""

    name = "cuda"

    def __init__(self) -> None:
        self.created = 0
        self.queries = 0
        self.done = False
        self._free: list[list[float]] = []

    def capturing(self) -> bool:
        return False

    def mark(self) -> list[float]:
        if self._free:
            mark = self._free.pop()
        else:
            self.created += 1
            mark = [0.0]
        mark[0] = time.perf_counter()
        return mark

    def release(self, marks: list[list[float]]) -> None:
        self._free.extend(marks)

    def ready(self, mark: list[float]) -> bool:
        self.queries += 1
        return self.done

    def elapsed_ms(self, start: list[float], end: list[float]) -> float:
        return (end[0] - start[0]) * 1e3


def test_device_marks_are_reused_and_an_unfinished_cycle_costs_one_query(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _FakeDeviceClock()
    monkeypatch.setattr(runtime, "_pick_clock", lambda: clock)
    monkeypatch.setattr(runtime, "_every", 1)
    runtime.patch_class(sys.modules[__name__], TARGETS)
    worker = Worker()
    worker.cycle({"draft": 0.0, "verify": 0.0, "gap": 0.0})
    assert clock.queries == 1  # the cycle's last mark is not done: nothing else is asked
    clock.done = True
    for _ in range(20):
        worker.cycle({"draft": 0.0, "verify": 0.0, "gap": 0.0})
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=5)
    assert len([r for r in reader.read_records(probe_dir) if r.kind == "cycle"]) == 21
    assert clock.created <= 12  # two cycles' worth of marks (six each), not 21 cycles' worth


def test_a_bad_stride_names_the_variable(tmp_path: Path) -> None:
    from perfgate.errors import ConfigError
    from perfgate.probe import probe_env

    with pytest.raises(ConfigError, match="PERFGATE_PROBE_EVERY='0' is not a whole number"):
        probe_env(tmp_path, "embedded", {"PERFGATE_PROBE_EVERY": "0"})
    with pytest.raises(ValueError, match="PERFGATE_PROBE_EVERY='four'"):
        runtime.parse_every("four")
    assert runtime.parse_every(None) is None and runtime.parse_every("8") == 8


def test_a_cuda_mark_follows_the_current_stream_when_it_changes() -> None:
    # The stream object is kept while the raw handle of the current stream stays the same;
    # a new handle (a side stream entered) means a new lookup.
    clock = object.__new__(runtime._CudaClock)
    handles = iter([7, 7, 9, 9, 7])
    lookups: list[str] = []
    clock._raw_stream = lambda: next(handles)
    clock._current_stream = lambda: lookups.append("looked up") or f"stream {len(lookups)}"
    clock._raw = -1
    clock._stream = None
    seen = [clock._stream_now() for _ in range(5)]
    assert seen == ["stream 1", "stream 1", "stream 2", "stream 2", "stream 3"]
    assert len(lookups) == 3


def test_unpatching_puts_the_original_methods_back(probe_dir: Path) -> None:
    original = Worker.__dict__["verify"]
    runtime.patch_class(sys.modules[__name__], TARGETS)
    assert Worker.__dict__["verify"] is not original
    assert len(runtime.unpatch_class(sys.modules[__name__], TARGETS)) == 4
    assert Worker.__dict__["verify"] is original
    assert runtime.unpatch_class(sys.modules[__name__], TARGETS) == []
    Worker().cycle({"draft": 0.0, "verify": 0.0, "gap": 0.0})
    assert runtime._probe is None  # nothing timed, no probe started


class Accepted:
    def __init__(self, drafts: tuple[int, ...], rows: tuple[int, ...]) -> None:
        self.drafts, self.rows = drafts, rows


class Verified:
    def __init__(self, accept_lens: object) -> None:
        self.accept_lens = accept_lens


class Slots:
    def __init__(self, req_pool_indices: object) -> None:
        self.req_pool_indices = req_pool_indices


class AcceptingWorker:
    """Three accept methods shaped as the tables read them: the embedded engine's (host
    tuples on the result), spec v2's (a tensor with the bonus, rows on the argument) and spec
    v1's (a tuple holding a list without the bonus)."""

    def cycle(self, shape: str, value: object) -> None:
        getattr(self, shape)(Slots(value))

    def embedded(self, batch: Slots) -> Accepted:
        return Accepted((3, 0), (0, 2))

    def v2(self, batch: Slots) -> Verified:
        import torch

        return Verified(torch.tensor([4, 1, 2]))

    def v1(self, batch: Slots) -> tuple[object, object]:
        return (None, type("Out", (), {"accept_length_per_req_cpu": [2, 0, 5]})())


def accepting_targets() -> list[ProbeTarget]:
    from perfgate.probe.targets import AcceptedDrafts

    embedded = AcceptedDrafts(("result.drafts",), ("result.rows",))
    v2 = AcceptedDrafts(("result.accept_lens",), ("arg.slots_cpu", "arg.req_pool_indices"), 1)
    # A release renamed the value: the first path that leads to one is taken.
    v1 = AcceptedDrafts(
        ("result.1.renamed_per_req_cpu", "result.1.accept_length_per_req_cpu"),
        ("arg.req_pool_indices",),
    )
    return [
        ProbeTarget(__name__, "AcceptingWorker", "cycle", metrics.CYCLE),
        ProbeTarget(__name__, "AcceptingWorker", "embedded", metrics.ACCEPT, accepted=embedded),
        ProbeTarget(__name__, "AcceptingWorker", "v2", metrics.ACCEPT, accepted=v2),
        ProbeTarget(__name__, "AcceptingWorker", "v1", metrics.ACCEPT, accepted=v1),
    ]


def test_each_cycle_records_what_each_sequence_accepted(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    targets = accepting_targets()
    for target in targets:
        monkeypatch.setattr(AcceptingWorker, target.method, AcceptingWorker.__dict__[target.method])
    runtime.patch_class(sys.modules[__name__], targets)
    worker = AcceptingWorker()
    worker.cycle("embedded", None)
    worker.cycle("v2", torch.tensor([7, 3, 5]))
    worker.cycle("v1", [1, 2, 3])
    worker.cycle("v1", [1, 2])  # rows that do not pair up with the counts: left out
    worker.cycle("v2", object())  # no req_pool_indices: left out, and the server goes on
    worker.embedded(Slots(None))  # outside a cycle: no record at all
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=5)
    cycles = [r for r in reader.read_records(probe_dir) if r.kind == "cycle"]
    assert [(c.accepted, c.rows) for c in cycles] == [
        ((3, 0), (0, 2)),
        ((3, 0, 1), (7, 3, 5)),  # the bonus token taken off spec v2's counts
        ((2, 0, 5), (1, 2, 3)),
        ((), ()),
        ((), ()),
    ]
    assert all("accept" in c.ms for c in cycles)
