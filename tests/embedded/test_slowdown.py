"""--debug-slow-phase: a phase longer by the stated fraction of its own time, as the probe sees it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from perfgate.config import Scenario
from perfgate.engines.embedded import worker as worker_module
from perfgate.engines.embedded.args import check_args, parse_args
from perfgate.engines.embedded.engine import build_app
from perfgate.engines.embedded.worker import EagleWorker
from perfgate.errors import ConfigError
from perfgate.fingerprint import collect_fingerprint
from perfgate.probe import reader, runtime
from perfgate.probe.targets import EMBEDDED_TARGETS
from perfgate.spec import slowdown

from .common import PROMPTS, SpecWorkerFactory, requests

SPEC_TARGETS = [t for t in EMBEDDED_TARGETS if t.qualname == "EagleWorker"]


@pytest.fixture
def probe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The probe on in this process, over the speculative worker's phases, for one test."""
    monkeypatch.setattr(runtime, "_out_dir", tmp_path)
    monkeypatch.setattr(runtime, "_probe", None)
    runtime.patch_class(sys.modules[worker_module.__name__], SPEC_TARGETS)
    yield tmp_path
    runtime.unpatch_class(sys.modules[worker_module.__name__], SPEC_TARGETS)
    if runtime._probe is not None:
        runtime._probe.close()


def test_verify_slowed_by_900_percent_takes_ten_times_as_long_in_the_same_run(
    spec_worker: SpecWorkerFactory, probe_dir: Path
) -> None:
    plain = spec_worker("eagle3", 3)
    slowed = EagleWorker(
        plain.target, plain.drafter, plain.params, graphs=plain.graphs, slow_phases={"verify": 9.0}
    )
    windows: dict[str, list[tuple[float, float]]] = {"plain": [], "slowed": []}
    for _ in range(3):  # interleaved, so the machine's load falls on both alike
        for name, worker in (("plain", plain), ("slowed", slowed)):
            began = time.time()
            worker.generate(requests(PROMPTS[:1], 16))
            windows[name].append((began, time.time()))
    reader.wait_until_complete(probe_dir, time.time(), timeout_s=10)
    cycles = [r for r in reader.read_records(probe_dir) if r.kind == "cycle"]

    def times_ms(name: str, phase: str) -> list[float]:
        inside = [
            r.ms[phase]
            for r in cycles
            if phase in r.ms and any(a <= r.started_at <= b for a, b in windows[name])
        ]
        assert len(inside) >= 6, (name, phase, len(inside))
        return inside

    def fastest_ms(name: str, phase: str) -> float:
        """The phase's fastest cycle in these calls: load only adds time, and of a dozen
        cycles some run unhindered. A slowed cycle waits nine times its own time in that
        cycle, so even its fastest is ten times an unhindered one."""
        return min(times_ms(name, phase))

    def draft_share(name: str) -> float:
        """Draft's fastest cycle over draft extend's, in the same calls: both the drafter's
        passes, and a minimum is what load cannot raise (it only adds time, and of a dozen
        cycles some run unhindered)."""
        return min(times_ms(name, "draft")) / min(times_ms(name, "draft_extend"))

    verify = fastest_ms("slowed", "verify") / fastest_ms("plain", "verify")
    draft = fastest_ms("slowed", "draft") / fastest_ms("plain", "draft")
    # +900%: ten times as long. Fastest against fastest: the medians' ratio fell to 4.2 once
    # on a loaded CI machine, where the plain calls' cycles ran slower than the slowed calls'
    # own work. No upper bound: load stretches the wait with the phase's own time.
    assert verify > 5.0, verify
    # The other phases as they were, against verify in the same calls (no bound on draft's
    # time by itself: load can stretch every cycle of one call).
    assert verify > 3 * draft, (verify, draft)
    # Nor did draft move against draft extend: 0.44 to 1.87 times with 3 and with 5 copies of
    # this test on 2 cores, where +900% planted on draft instead moved it 4.9 to 18 times.
    share = draft_share("slowed") / draft_share("plain")
    assert 1 / 4 < share < 4, share


def test_the_flag_or_its_variable_sets_the_phases_and_a_plain_server_ignores_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ["--model-path", "perfgate/llama-tiny", "--speculative-algorithm", "EAGLE3"]
    spec += ["--speculative-draft-model-path", "perfgate/eagle3-llama-tiny"]
    args = parse_args([*spec, "--debug-slow-phase", "verify=0.02,cycle=0.5"])
    check_args(args)
    assert args.debug_slow_phase == {"verify": 0.02, "cycle": 0.5}
    monkeypatch.setenv(slowdown.VARIABLE, "draft_extend=0.1")
    args = parse_args(spec)
    check_args(args)
    assert args.debug_slow_phase == {"draft_extend": 0.1}
    plain = parse_args(["--model-path", "perfgate/llama-tiny"])
    check_args(plain)
    assert plain.debug_slow_phase == {}  # nothing injected, so the fingerprint names nothing
    monkeypatch.setenv(slowdown.VARIABLE, "verify=2%")
    with pytest.raises(ConfigError, match=f"^{slowdown.VARIABLE}: 'verify=2%'"):
        check_args(parse_args(spec))


def test_the_server_reports_its_slowdown_and_the_fingerprint_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(slowdown.VARIABLE, "verify=0.02")
    argv = ["--model-path", "perfgate/llama-tiny", "--speculative-algorithm", "EAGLE3"]
    argv += ["--speculative-draft-model-path", "perfgate/eagle3-llama-tiny", "--num-threads", "1"]
    args = parse_args(argv)
    app = build_app(args, check_args(args))
    scenario = Scenario("tiny", "embedded", "perfgate/llama-tiny", "perfgate/eagle3-llama-tiny")
    fingerprint = collect_fingerprint(scenario, app.server_info(), None, environ={})
    assert fingerprint[slowdown.FINGERPRINT_FIELD] == "verify +2.0%"
    assert app.engine.worker.slowdown.fractions == {"verify": 0.02}


def test_a_block_set_aside_is_not_the_slowed_phases_own_time(
    spec_worker: SpecWorkerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accept queues the draft extend inside it (the overlap schedule): slowing accept must
    not wait for a share of the extend's time, which the probe charges to draft_extend."""
    from perfgate.engines.embedded import slowdown as engine_slowdown
    from perfgate.metrics import ACCEPT

    waits: list[float] = []
    monkeypatch.setattr(engine_slowdown, "wait_s", waits.append)
    slowed = engine_slowdown.PhaseSlowdown({ACCEPT: 1.0}, torch.device("cpu"))
    with slowed.inside(ACCEPT):
        with slowed.aside(ACCEPT):
            time.sleep(1.0)  # another phase's work: 100 times the phase's own below
        time.sleep(0.01)
    (wait,) = waits
    assert 0.01 <= wait < 0.5  # about the phase's own 10 ms; 1 s and more if the block counted

    # In the engine: slowing accept over a whole generation waits once per cycle, each time
    # for less than the cycle's draft extend would add.
    worker = spec_worker("perturbed", 3)
    worker.slowdown = engine_slowdown.PhaseSlowdown({ACCEPT: 1.0}, worker.device)
    extend = worker.draft_extend

    def slow_extend(*args: object) -> None:
        time.sleep(0.2)
        extend(*args)  # type: ignore[arg-type]

    worker.draft_extend = slow_extend  # type: ignore[method-assign]
    waits.clear()
    generation = worker.generate(requests(PROMPTS[:1], 12))[0]
    assert len(waits) == generation.spec_verify_ct
    assert max(waits) < 0.1
