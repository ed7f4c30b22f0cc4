"""The probe in SGLang's process layout: injected through PYTHONPATH into every process (a
spawned TP rank too), patching SGLang's classes by name when their modules load, one file per
rank, the phases of spec v2 as the target table names them.

The SGLang here is a stand-in with the real module, class and method names and call structure
(tests/engines/test_sglang_source.py proves those names against the real wheels).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from perfgate.probe import probe_env
from perfgate.probe.reader import read_records, wait_until_complete

from ..hang import HANG_S

TP_WORKER = """
import time
class TpModelWorker:
    def forward_batch_generation(self, batch=None, forward_batch=None, is_verify=False):
        time.sleep(0.008)  # the target forward
"""
EAGLE_WORKER_V2 = """
import time
from sglang.srt.managers.tp_worker import TpModelWorker

class EagleDraftWorker:
    def draft(self, batch):
        time.sleep(0.002)
    def _draft_extend_for_decode(self, batch, result):
        time.sleep(0.001)

class EAGLEWorkerV2:
    def __init__(self):
        self.target_worker, self.draft_worker = TpModelWorker(), EagleDraftWorker()
    def forward_batch_generation(self, batch, on_publish=None):
        if not batch.forward_mode.is_decode():
            self.target_worker.forward_batch_generation(batch)
            return
        self.draft_worker.draft(batch)
        self.verify(batch)
        self.draft_worker._draft_extend_for_decode(batch, None)
    def verify(self, batch):
        self.target_worker.forward_batch_generation(None, forward_batch=batch, is_verify=True)
        time.sleep(0.003)  # sample, accept, commit
"""
SCHEDULER = """
import multiprocessing, os, types

def rank(n):
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
    worker = EAGLEWorkerV2()
    batch = lambda decode: types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_decode=lambda: decode))
    worker.forward_batch_generation(batch(False))
    for _ in range(3):
        worker.forward_batch_generation(batch(True))

if __name__ == "__main__":
    ranks = [multiprocessing.get_context("spawn").Process(target=rank, args=(n,)) for n in range(2)]
    for p in ranks: p.start()
    for p in ranks: p.join()
    print("pids", " ".join(str(p.pid) for p in ranks))
"""


def _fake_sglang(root: Path) -> None:
    for package in ("sglang", "sglang/srt", "sglang/srt/managers", "sglang/srt/speculative"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "sglang/srt/managers/tp_worker.py").write_text(textwrap.dedent(TP_WORKER))
    (root / "sglang/srt/speculative/eagle_worker_v2.py").write_text(
        textwrap.dedent(EAGLE_WORKER_V2)
    )
    (root / "scheduler.py").write_text(textwrap.dedent(SCHEDULER))


def test_every_rank_times_the_phases_of_spec_v2(tmp_path: Path) -> None:
    _fake_sglang(tmp_path)
    probe_dir = tmp_path / "probe"
    env = probe_env(
        probe_dir, "sglang", {"PYTHONPATH": str(tmp_path)}, engine_version="0.5.23", mode="spec"
    )
    started = time.time()
    done = subprocess.run(
        [sys.executable, "scheduler.py"],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "perfgate probe: not active" not in done.stderr
    rank_pids = {int(p) for p in done.stdout.split()[1:]}
    wait_until_complete(probe_dir, time.time(), timeout_s=10)
    assert {
        int(f.stem.removeprefix("probe-")) for f in probe_dir.glob("probe-*.jsonl")
    } == rank_pids
    records = [r for r in read_records(probe_dir) if r.started_at >= started]
    for pid in rank_pids:
        mine = [r for r in records if r.pid == pid]
        assert [r.kind for r in mine] == ["prefill", "cycle", "cycle", "cycle"]
        for cycle in mine[1:]:
            assert set(cycle.ms) == {"draft", "verify", "accept", "draft_extend", "cycle"}
            assert cycle.ms["verify"] >= 8.0 and cycle.ms["accept"] >= 3.0
            # The phases are disjoint parts of the cycle: counted twice, the target forward
            # (nested in `EAGLEWorkerV2.verify`) would push their sum past the cycle's.
            named = sum(cycle.ms[p] for p in ("draft", "verify", "accept", "draft_extend"))
            assert cycle.ms["cycle"] >= named - 1e-6


def test_the_probe_brings_nothing_heavy_into_the_server(tmp_path: Path) -> None:
    # SGLang's environment pins its own stack: the probe must import only the standard
    # library and perfgate's own light modules.
    _fake_sglang(tmp_path)
    script = (
        "import sys\n"
        "import sglang.srt.speculative.eagle_worker_v2\n"
        "heavy = {'httpx', 'sqlalchemy', 'jinja2', 'torch', 'pytest', 'alembic'} & set(sys.modules)\n"
        "print(sorted(heavy), 'perfgate.probe.runtime' in sys.modules)\n"
    )
    env = probe_env(
        tmp_path / "probe",
        "sglang",
        {"PYTHONPATH": str(tmp_path)},
        engine_version="0.5.23",
        mode="spec",
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.stdout.split("\n")[0] == "[] True", done.stdout + done.stderr


def test_the_plain_twin_times_whole_decode_steps(tmp_path: Path) -> None:
    _fake_sglang(tmp_path)
    script = (
        "import types\n"
        "from sglang.srt.managers.tp_worker import TpModelWorker\n"
        "w = TpModelWorker()\n"
        "mode = lambda d: types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_decode=lambda: d))\n"
        "w.forward_batch_generation(mode(False))\n"
        "w.forward_batch_generation(mode(True))\n"
    )
    probe_dir = tmp_path / "probe"
    env = probe_env(
        probe_dir, "sglang", {"PYTHONPATH": str(tmp_path)}, engine_version="0.5.23", mode="plain"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    wait_until_complete(probe_dir, time.time(), timeout_s=10)
    kinds = [(r.kind, sorted(r.ms)) for r in read_records(probe_dir)]
    assert kinds == [("prefill", ["prefill"]), ("cycle", ["cycle"])]
