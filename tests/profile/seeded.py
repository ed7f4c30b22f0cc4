"""Running a GPU record script that seeds its scenario (benchmarks/record.sh's seeded_config)
end to end on the CPU: the default scenario seeded in the GPU scenario's place (BASE), with
the smoke scenario's short requests (SEEDED_SMOKE), one launch, this checkout first on
PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO
from ..hang import HANG_S


def run_seeded(script: str, out: Path) -> None:
    """Run benchmarks/`script` into `out` and check it ended 0, showing its output if not."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHON": sys.executable, "BASE": "embedded-default", "LAUNCHES": "1",
           "SEEDED_SMOKE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), path] if path else [str(REPO)])}  # fmt: skip
    done = subprocess.run(
        [str(REPO / "benchmarks" / script), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
