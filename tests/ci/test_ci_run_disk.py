""".ci/run's first check: too little disk ends it at once, with the figures, before anything
is installed (a run that starts anyway fails part-way with "No space left on device")."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..conftest import REPO
from ..hang import HANG_S
from ..lockdown import require_unshare


def test_too_little_disk_for_the_temporary_folders_exits_1_naming_it(tmp_path: Path) -> None:
    require_unshare()  # the folders are tmpfs mounts, in a private mount namespace
    checkout, small = tmp_path / "checkout", tmp_path / "small"
    checkout.mkdir()
    small.mkdir()
    # The checkout on a tmpfs of 64 GiB (a limit, not memory taken: df counts it free), so that
    # its own check passes whatever this machine's disk has left, and the small TMPDIR's ends
    # the run. What is in the checkout after the run is listed before the namespace goes.
    script = (
        f"mount -t tmpfs -o size=64g tmpfs {checkout} && mount -t tmpfs -o size=64m tmpfs {small}"
        f" && cd {checkout} && mkdir .ci && cp {REPO / '.ci' / 'run'} .ci/run"
        " && { bash .ci/run; code=$?; echo \"left: $(ls -A | tr '\\n' ' ')\"; exit $code; }"
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        env={**os.environ, "TMPDIR": str(small)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"disk: 64.0 GiB free for {checkout}; this run needs about 10" in done.stdout
    assert f"disk: 0.1 GiB free for {small} (TMPDIR); this run needs about 3" in done.stdout
    assert (
        f".ci/run: error: not enough disk for {small} (TMPDIR): 0.1 GiB free, about 3 GiB needed"
        in done.stderr
    )
    assert done.stdout.splitlines()[-1] == "left: .ci "  # nothing installed
