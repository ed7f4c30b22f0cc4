"""Every session, sweep, profile and server has a folder of its own: runs started in the same
second from one directory never read each other's probe files nor overwrite each other's logs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import perfgate.session
from perfgate.config import load_config
from perfgate.folders import new_folder, session_folder
from perfgate.measure import measure_mode
from perfgate.session import GateSession
from perfgate.spec.options import GateOptions

from .conftest import write_config

FOREIGN_MS = 99_999.0  # no cycle of the tiny server takes this long


class _FrozenClock(datetime):
    """`datetime` whose now() is always the same second, as for two runs started together."""

    @classmethod
    def now(cls, tz: object = None) -> _FrozenClock:  # type: ignore[override]
        return cls(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def test_sessions_started_in_the_same_second_get_folders_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path)
    monkeypatch.setattr(perfgate.session, "datetime", _FrozenClock)
    first, second = (GateSession(GateOptions(config=str(config))) for _ in range(2))
    folders = {first.run_for("tiny").workdir, second.run_for("tiny").workdir}
    assert len(folders) == 2
    assert all(folder.parent.parent == tmp_path / ".perfgate" / "runs" for folder in folders)


def test_a_new_folder_is_never_one_that_exists(tmp_path: Path) -> None:
    made = [new_folder(tmp_path, "20261130T120000") for _ in range(3)]
    assert [p.name for p in made] == ["20261130T120000", "20261130T120000-2", "20261130T120000-3"]
    assert all(p.is_dir() for p in made)
    assert session_folder(tmp_path) != session_folder(tmp_path)


_FOREIGN_SERVER = """
import json, os, sys, time
path = os.path.join(sys.argv[1], f"probe-{os.getpid()}.jsonl")
deadline, ms = time.monotonic() + float(sys.argv[2]), float(sys.argv[3])
seq = 0
while time.monotonic() < deadline:
    now = time.time()
    records = [
        {"kind": "cycle", "pid": os.getpid(), "seq": seq, "t": now, "every": 1,
         "clock": "cpu", "ms": {"cycle": ms, "verify": ms}},
        {"kind": "flushed", "t": now, "pending": 0},
    ]
    with open(path, "a") as out:
        out.write("".join(json.dumps(r) + "\\n" for r in records))
    seq += 1
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_a_server_reads_only_its_own_probe_files(tmp_path: Path) -> None:
    # Another server probing into the folder this one would use, while this one runs: as two
    # sessions sharing `.perfgate/runs/<second>/` did.
    (scenario,) = load_config(str(write_config(tmp_path))).select(["tiny"])
    workdir = tmp_path / "work"
    shared = workdir / "probe-plain"
    shared.mkdir(parents=True)
    foreign = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_FOREIGN_SERVER),
            str(shared),
            "120",
            str(FOREIGN_MS),
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while not list(shared.glob("probe-*.jsonl")):
            assert time.monotonic() < deadline and foreign.poll() is None
            time.sleep(0.01)
        result = measure_mode(scenario, "plain", workdir)
    finally:
        foreign.kill()
        foreign.wait()
    assert result.phases, "the tiny server's own cycles were timed"
    assert max(p.p90_ms for p in result.phases) < FOREIGN_MS
    foreign_lines = [line for f in shared.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert foreign_lines, "the other server did write into the shared folder"
