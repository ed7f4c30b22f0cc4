"""Files written whole or not at all, with the mode any new file gets here.

A reader sees the old file or the new one, never half of one: the text goes to a new file beside
the target, renamed over it once complete. That file is created with mode 0o666, less the
umask, as ``open()`` would create it (``tempfile.mkstemp`` gives 0o600, which a report or a
baseline must not keep). The kernel applies the umask, so nothing reads it: reading it means
setting it, which no thread may do while another creates files.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

NEW_FILE_MODE = 0o666  # less the umask, as for any new file
_TRIES = 100


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
