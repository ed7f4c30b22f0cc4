"""Files perfgate rewrites whole: the report, baselines, the session pointer, the runner's state,
history exports. Each gets the mode any new file gets here (0o666 less the umask), is written
whole or not at all, and leaves no temporary file beside it."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perfgate.baselines import write_baseline
from perfgate.ci.pointer import SessionPointer, write_pointer
from perfgate.cli import main
from perfgate.files import write_atomically
from perfgate.report import write_report
from perfgate.runner.hooks import HookResult, save_state
from perfgate.store import close_history, open_history, record_run

from .factories import measurement, record
from .test_baselines import _approve


def _report(folder: Path) -> Path:
    return write_report(folder / "reports" / "index.html", [record(measurement())])


def _baseline(folder: Path) -> Path:
    path = folder / "baselines" / "cpu" / "tiny.json"
    write_baseline(_approve(), path)
    return path


def _pointer(folder: Path) -> Path:
    return write_pointer(folder, SessionPointer(exit_code=0))


def _state(folder: Path) -> Path:
    return save_state(HookResult(), folder / "state.json", {})


def _export(folder: Path) -> Path:
    url = f"sqlite:///{folder / 'history.db'}"
    sessions = open_history(url)
    with sessions.begin() as session:
        record_run(session, record(measurement()))
    close_history(sessions)
    out = folder / "runs.jsonl"
    assert main(["history", "export", "--db", url, "--out", str(out)]) == 0
    return out


WRITERS: dict[str, Callable[[Path], Path]] = {
    "report": _report,
    "baseline": _baseline,
    "session pointer": _pointer,
    "runner state": _state,
    "history export": _export,
}


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set the process's umask for the test; the one before is put back."""
    before = os.umask(0o022)
    yield os.umask
    os.umask(before)


@pytest.mark.parametrize(
    ("mask", "mode"),
    [
        pytest.param(0o022, 0o644, id="umask 022"),
        pytest.param(0o077, 0o600, id="umask 077"),
        pytest.param(0o002, 0o664, id="umask 002"),
    ],
)
@pytest.mark.parametrize("writer", WRITERS)
def test_a_rewritten_file_gets_the_mode_of_any_new_file(
    tmp_path: Path, umask: Callable[[int], None], writer: str, mask: int, mode: int
) -> None:
    umask(mask)
    path = WRITERS[writer](tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    path.chmod(0o600)  # as an older perfgate left it
    path = WRITERS[writer](tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}")]
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".partial")]


def test_a_failed_write_leaves_the_old_file_and_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "index.html"
    path.write_text("old")
    with pytest.raises(RuntimeError), write_atomically(path) as out:
        out.write("half of the new")
        raise RuntimeError("the renderer failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["index.html"]
