"""Files perfgate rewrites whole: the report, baselines, the session pointer, the runner's state,
history exports. Each gets the mode any new file gets here (0o666 less the umask), is written
whole or not at all, and leaves no temporary file beside it. A path given for one is checked
before any work, and the check leaves nothing behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perfgate.baselines import write_baseline
from perfgate.ci.pointer import SessionPointer, write_pointer
from perfgate.cli import main
from perfgate.errors import ConfigError, ExitCode
from perfgate.files import check_output_file, check_output_folder, write_atomically
from perfgate.report import write_report
from perfgate.runner.hooks import HookResult, save_state
from perfgate.store import close_history, open_history, record_run

from .factories import measurement, record
from .lockdown import immutable
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


def _refused(check: Callable[[], object]) -> str:
    with pytest.raises(ConfigError) as caught:
        check()
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    return str(caught.value)


def test_an_output_file_that_cannot_be_written_is_named_with_its_flag(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    under = tmp_path / "file" / "r.html"
    assert _refused(lambda: check_output_file("", "--out")) == (
        "--out: is empty: it names no file; give --out a file's path"
    )
    assert _refused(lambda: check_output_file(str(tmp_path), "--out")) == (
        f"{tmp_path}: is a folder, but --out names a file to write; name a file in it "
        f"(--out {tmp_path / 'NAME'}), or pass another --out PATH"
    )
    assert _refused(lambda: check_output_file(str(under), "--json")) == (
        f"{tmp_path / 'file'}: is a file, so --json {under} cannot be created under it; move "
        "that file away, or pass another --json PATH"
    )
    assert _refused(lambda: check_output_file(str(under / "deeper"), "--json")).startswith(
        f"{tmp_path / 'file'}: is a file, so --json {under / 'deeper'} cannot be created"
    )
    # A writer that makes its folders: the nearest existing one is checked.
    assert check_output_file(str(tmp_path / "new" / "r.html"), "--out") == (
        tmp_path / "new" / "r.html"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing made, nothing left


def test_an_appended_file_needs_its_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nodir" / "s.md"
    assert _refused(lambda: check_output_file(str(missing), "--out", appends=True)) == (
        f"{tmp_path / 'nodir'}: no such folder, so --out {missing} cannot be written; create the "
        "folder first, or pass another --out PATH"
    )
    summary = tmp_path / "summary.md"
    summary.write_text("kept")
    assert check_output_file(str(summary), "--out", appends=True) == summary
    assert summary.read_text() == "kept"
    with immutable(summary):
        refused = _refused(lambda: check_output_file(str(summary), "--out", appends=True))
    assert refused.startswith(f"{summary}: cannot be opened for writing (Operation not permitted)")
    assert "`chattr -i -a` it, or pass another --out PATH" in refused


def test_an_output_folder_that_cannot_be_written_is_named_with_its_flag(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert _refused(lambda: check_output_folder(str(tmp_path / "file"), "--baselines")) == (
        f"{tmp_path / 'file'}: is a file, not a folder --baselines can write into; move that "
        "file away, or pass another --baselines DIR"
    )
    assert _refused(lambda: check_output_folder("", "--out")) == (
        "--out: is empty: it names no folder; give --out a folder's path"
    )
    assert check_output_folder(str(tmp_path), "--out") == tmp_path
    assert check_output_folder(str(tmp_path / "a" / "b"), "--out") == tmp_path / "a" / "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_folder_that_takes_no_new_file_is_refused_before_any_work(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    with immutable(folder):  # as a read-only mount would: not even root may create a file
        refused = _refused(lambda: check_output_file(str(folder / "r.html"), "--out"))
        assert refused.startswith(
            f"{folder}: no file can be created in this folder (Operation not permitted), so "
            f"--out {folder / 'r.html'} cannot be written; it is immutable or append-only"
        )
        assert _refused(lambda: check_output_folder(str(folder), "--out")).startswith(
            f"{folder}: no file can be created in this folder"
        )
    assert list(folder.iterdir()) == []
