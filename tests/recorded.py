"""One recorded and approved project of the tiny scenario, made once for the whole suite.

The tests of what comes after recording (a gate run judged against a reviewed baseline, CI's
steps, doctor's predictions) start from a copy of it instead of recording runs of their own:
each run is a server pair. Under several workers (scripts/test) the first worker to need it
records it and the others wait for it and read the same folder: a lock in the temporary root
that the workers share.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfgate.ci.pointer import POINTER

from .conftest import ONE_RUN_SCENARIO, run_perfgate, write_config
from .in_process import perfgate_main
from .session_once import session_lock

RUNS = 3  # one approved run would show nothing of how far launches land apart


@dataclass(frozen=True)
class RecordedProject:
    """A folder with perfgate.toml (ONE_RUN_SCENARIO: a verdict of one run), history.db with
    runs 1-3 recorded by `perfgate run --no-gate` and baselines/PROFILE/tiny.json approving
    them (`--approved-by ci --reason first`). Each run is `perfgate run --no-gate` in a log
    (its output to pipes, not a terminal) with TERM=xterm; `first_run` and `first_run_stderr`
    are what the first one wrote to stdout and stderr."""

    folder: Path
    first_run: str
    first_run_stderr: str

    def copy_to(self, dest: Path) -> Path:
        """Copy the project's files into `dest` (made where missing); return `dest`. The last
        session's pointer names the copy's history and report, as if it had run there."""
        shutil.copytree(self.folder, dest, symlinks=True, dirs_exist_ok=True)
        pointer = dest / POINTER
        pointer.write_text(pointer.read_text().replace(str(self.folder), str(dest)))
        return dest


def shared_project(config: pytest.Config, factory: pytest.TempPathFactory) -> RecordedProject:
    """The session's recorded project, recorded here unless a worker did it already."""
    with session_lock(config, factory, "recorded-project") as root:
        folder = root / "recorded-project"
        # Written last, the first run's output: where it is, the project is complete.
        first_run = root / "recorded-project-first-run.json"
        if not first_run.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            first_run.write_text(json.dumps(_record(folder)))
    stdout, stderr = json.loads(first_run.read_text())
    return RecordedProject(folder, stdout, stderr)


def _record(folder: Path) -> tuple[str, str]:
    """Record and approve the project in `folder`; return what its first run printed."""
    folder.mkdir(parents=True)
    write_config(folder, ONE_RUN_SCENARIO)
    # As on a developer's machine (also when the suite runs in CI), in a terminal's variables.
    local = {"CI": "", "TERM": "xterm"}
    outputs = []
    for _ in range(RUNS):
        recorded = run_perfgate("run", "--no-gate", cwd=folder, env=local)
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        outputs.append((recorded.stdout, recorded.stderr))
    ids = [arg for n in range(1, RUNS + 1) for arg in ("--run", str(n))]
    approve = ("baseline", "update", *ids, "--approved-by", "ci", "--reason", "first")
    approved = perfgate_main(*approve, cwd=folder, env=local)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    return outputs[0]
