"""Files written whole or not at all, with the mode any new file gets here; and the check that
a path given for one can be written, made before any work.

A reader sees the old file or the new one, never half of one: the text goes to a new file beside
the target, renamed over it once complete. That file is created with mode 0o666, less the
umask, as ``open()`` would create it (``tempfile.mkstemp`` gives 0o600, which a report or a
baseline must not keep). The kernel applies the umask, so nothing reads it: reading it means
setting it, which no thread may do while another creates files.

A command that writes a file or a folder a flag names checks the path first
(`check_output_file`, `check_output_folder`), so that a path it cannot write is refused
(exit 64, naming the flag and the path) before anything is measured or read; the history's
write check (perfgate.store.probe_write) proves its folder the same way (`writable_folder`).
"""

from __future__ import annotations

import errno
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from perfgate.errors import ConfigError

NEW_FILE_MODE = 0o666  # less the umask, as for any new file
_TRIES = 100
_HINTS = {
    errno.EROFS: "it lies on a read-only mount: remount it read-write",
    errno.EPERM: "it is immutable or append-only (`lsattr` shows it): `chattr -i -a` it",
    errno.EACCES: "permission denied: give the user that runs perfgate write access to it",
}


@contextmanager
def write_atomically(path: Path) -> Iterator[IO[str]]:
    """Yield a text file that replaces `path` (UTF-8) when the block ends without an error.

    The folder is created if needed. On an error the new text is dropped and `path` is left
    as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = _create_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8), whole or not at all; return `path`."""
    with write_atomically(path) as out:
        out.write(text)
    return path


def _create_beside(path: Path) -> tuple[int, Path]:
    """Create a new, uniquely named file beside `path` (hidden, like mkstemp's); open it."""
    for _ in range(_TRIES):
        partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(partial, flags, NEW_FILE_MODE), partial
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path} after {_TRIES} tries")


def check_output_file(given: str, flag: str, *, appends: bool = False) -> Path:
    """Refuse, before any work, a file path that `flag` gave and that cannot be written.

    The path must name a file (not be empty, not be a folder) in a folder that takes a new file
    (proven by creating and removing one). The writers of `write_atomically` make the missing
    folders between, so the nearest existing one is checked; one that `appends` (to
    $GITHUB_STEP_SUMMARY, say) writes in place: its folder must exist, and the file, if there,
    must open for writing (it is closed unwritten). Returns the path.
    """
    path = _given(given, flag, "file")
    elsewhere = f"or pass another {flag} PATH"
    if path.is_dir():
        raise ConfigError(
            f"is a folder, but {flag} names a file to write",
            file=path,
            fix=f"name a file in it ({flag} {path / 'NAME'}), {elsewhere}",
        )
    folder = writable_folder(path.parent, f"{flag} {path}", elsewhere)
    if appends and folder != path.parent:
        raise ConfigError(
            f"no such folder, so {flag} {path} cannot be written",
            file=path.parent,
            fix=f"create the folder first, {elsewhere}",
        )
    if appends and path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as error:
            raise ConfigError(
                f"cannot be opened for writing ({error.strerror})",
                file=path,
                fix=f"{refusal_hint(error)}, {elsewhere}",
            ) from None
    return path


def check_output_folder(given: str, flag: str) -> Path:
    """Refuse, before any work, a folder path that `flag` gave and that cannot be written: empty,
    a file, or in (or under) a folder that takes no new file. Returns the path."""
    path = _given(given, flag, "folder")
    elsewhere = f"or pass another {flag} DIR"
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"is a file, not a folder {flag} can write into",
            file=path,
            fix=f"move that file away, {elsewhere}",
        )
    writable_folder(path, f"{flag} {path}", elsewhere)
    return path


def writable_folder(start: Path, target: str, elsewhere: str) -> Path:
    """The folder `target` would be written in, `start` or (the folders between made by the
    writer) its nearest existing ancestor, proven writable: a temporary file is created there
    and removed. A ConfigError names that folder when it is a file or takes no new file;
    `elsewhere` (how to choose another path) ends its fix."""
    folder = start
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(
            f"is a file, so {target} cannot be created under it",
            file=folder,
            fix=f"move that file away, {elsewhere}",
        )
    try:
        handle, name = tempfile.mkstemp(prefix=".perfgate-write-probe-", dir=folder)
    except OSError as error:
        raise ConfigError(
            f"no file can be created in this folder ({error.strerror}), so {target} cannot be "
            "written",
            file=folder,
            fix=f"{refusal_hint(error)}, {elsewhere}",
        ) from None
    os.close(handle)
    os.unlink(name)
    return folder


def refusal_hint(error: OSError) -> str:
    """What to do about a file or folder that refused a write, by the error's errno."""
    return _HINTS.get(error.errno or 0, f"make it writable ({error.strerror})")


def _given(given: str, flag: str, kind: str) -> Path:
    if not given:
        raise ConfigError(
            f"is empty: it names no {kind}", field=flag, fix=f"give {flag} a {kind}'s path"
        )
    return Path(given)
