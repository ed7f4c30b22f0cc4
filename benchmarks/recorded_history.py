"""What the scripts that read a recorded history's tables share (host_phase_pairs.py,
wall_parts.py, replan.py, launch_noise.py): a read-only connection, a copy to open with perfgate's
store (which would bring an older schema to its revision in place), a check that each file is a
perfgate history with the tables and columns a script reads, and its table printed and written.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


def connect(db: Path | str, immutable: bool = True) -> sqlite3.Connection:
    """The history read-only. immutable: a committed record, no writer and no -wal to read
    (it opens in a read-only folder too); False for a history a run may still write."""
    flags = "mode=ro&immutable=1" if immutable else "mode=ro"
    return sqlite3.connect(f"file:{db}?{flags}", uri=True)


@contextlib.contextmanager
def read_copy(url: str) -> Iterator[str]:
    """The history URL to open with perfgate's store: for a SQLite file, a copy's, so that the
    schema's upgrade on opening leaves a committed record's bytes alone; else `url` itself
    (a missing file too: the error then names it as given)."""
    path = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    if path is None or not path.is_file():
        yield url
        return
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        yield f"sqlite:///{copy}"


def missing(db: Path, columns: Mapping[str, str]) -> str | None:
    """Why `db` is not a history with these tables' columns ({table: "col, col"}), or None."""
    try:
        with connect(db) as connection:
            for name, read in columns.items():
                connection.execute(f"SELECT {read} FROM {name} LIMIT 1")
    except sqlite3.Error as error:
        return f"{db}: not a perfgate history with {', '.join(columns)} ({error})"
    return None


def emit(text: str, out: Path | None) -> int:
    """Print the table, write it to `out` where given; exit 0."""
    print(text, end="")
    if out:
        out.write_text(text)
    return 0


def tables_main(
    argv: list[str] | None,
    description: str,
    columns: Mapping[str, str],
    table: Callable[[list[Path]], str],
) -> int:
    """`SCRIPT HISTORY.db [HISTORY.db ...] [--out FILE.md]`: `table` of the histories, each
    checked first; exit 0, 64 naming a file that is not such a history."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("histories", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    for db in args.histories:
        why = missing(db, columns)
        if why:
            print(why, file=sys.stderr)
            return 64
    return emit(table(args.histories), args.out)
