""".ci/run's first check: too little disk ends it at once, with the figures, before anything
is installed (a run that starts anyway fails part-way with "No space left on device")."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..conftest import REPO
from ..lockdown import require_unshare


def test_too_little_disk_for_the_temporary_folders_exits_1_naming_it(tmp_path: Path) -> None:
    require_unshare()  # the small TMPDIR is a tmpfs, mounted in a private mount namespace
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", checkout / ".ci" / "run")
    small = tmp_path / "small"
    small.mkdir()
    script = f"mount -t tmpfs -o size=64m tmpfs {small} && exec bash .ci/run"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        cwd=checkout,
        env={**os.environ, "TMPDIR": str(small)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"disk: 0.1 GiB free for {small} (TMPDIR); this run needs about 3" in done.stdout
    assert (
        f".ci/run: error: not enough disk for {small} (TMPDIR): 0.1 GiB free, about 3 GiB needed"
        in done.stderr
    )
    assert sorted(p.name for p in checkout.iterdir()) == [".ci"]  # nothing installed
