"""The session pointer under concurrent sessions: 800 writes from 8 processes, none lost, and a
reader beside them never sees half a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.ci.pointer import load_pointer, pointer_path

from ..conftest import REPO
from ..hang import HANG_S

WRITERS, WRITES = 8, 100

_WRITER = """
import sys
from pathlib import Path
from perfgate.ci.pointer import SessionPointer, write_pointer
root, me, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
failed = 0
for index in range(count):
    try:
        write_pointer(root, SessionPointer(exit_code=0, runs=(me, index), profile="p" * 4096))
    except OSError as error:
        failed += 1
        print(f"lost: {error}", file=sys.stderr)
print(failed)
"""

_READER = """
import sys
from pathlib import Path
from perfgate.ci.pointer import load_pointer
from perfgate.errors import PerfgateError
path, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads = torn = 0
while not stop.exists() and reads < 1_000_000:
    try:
        load_pointer(path)
    except PerfgateError as error:
        torn += 1
        print(f"torn: {error}", file=sys.stderr)
    reads += 1
print(reads, torn)
"""


@pytest.mark.slow
def test_concurrent_writes_are_all_kept_and_never_read_torn(tmp_path: Path) -> None:
    path, stop = pointer_path(tmp_path), tmp_path / "stop"

    def start(script: str, *args: object) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", script, *map(str, args)]
        return subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    reader = start(_READER, path, stop)
    writers = [start(_WRITER, tmp_path, me, WRITES) for me in range(WRITERS)]
    lost = []
    for writer in writers:
        out, err = writer.communicate(timeout=HANG_S)
        assert writer.returncode == 0, err
        lost.append(int(out))
    stop.touch()
    out, err = reader.communicate(timeout=HANG_S)
    reads, torn = map(int, out.split())
    assert sum(lost) == 0, f"{sum(lost)} of {WRITERS * WRITES} writes lost"
    assert torn == 0, f"{torn} of {reads} reads torn: {err[:500]}"
    assert reads > 0
    final = load_pointer(path)
    assert final is not None and final.runs[1] == WRITES - 1  # some writer's last write
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert json.loads(path.read_text())["schema"] == 1
