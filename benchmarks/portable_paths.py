"""Make a benchmark record portable: this machine's paths replaced by names that hold anywhere.

    python benchmarks/portable_paths.py --replace /tmp/work.x1=WORK OUT/*.json OUT/run.log

A record is committed and read on other machines, so the server commands it quotes should
not carry the checkout's absolute path, the interpreter's or a temporary folder's. Always
replaced: the checkout (``.``) and this interpreter (``python3``); ``--replace PATH=NAME``
adds more (the output folder, a work folder). Files are rewritten in place, ``.gz`` ones
too, and a SQLite history (``.db``) in every text value of every table; the longest path is
replaced first, so a folder inside another keeps its own name. A gzipped tar (a proof's
state.tgz) is rewritten member by member.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def default_names() -> dict[str, str]:
    """This checkout and this interpreter, by the names a reader would type."""
    return {str(REPO): ".", sys.executable: "python3"}


def portable(text: str, names: Mapping[str, str]) -> str:
    """`text` with every path of `names` replaced by its name, longest path first."""
    for path in sorted(names, key=len, reverse=True):
        text = text.replace(path, names[path])
    return text


def rewrite(file: Path, names: Mapping[str, str]) -> None:
    """Rewrite `file` (gzipped if it ends in .gz, a SQLite history if in .db, a gzipped tar
    if in .tgz or .tar.gz) with the paths replaced."""
    if file.suffix == ".db":
        rewrite_history(file, names)
    elif file.name.endswith((".tgz", ".tar.gz")):
        rewrite_archive(file, names)
    elif file.name.endswith(".gz"):
        with gzip.open(file, "rt", encoding="utf-8") as handle:
            text = handle.read()
        with gzip.open(file, "wt", encoding="utf-8") as handle:
            handle.write(portable(text, names))
    else:
        file.write_text(portable(file.read_text("utf-8"), names), "utf-8")


def rewrite_archive(file: Path, names: Mapping[str, str]) -> None:
    """Rewrite every text file of a gzipped tar (a state.tgz: its history, tables, logs) with
    the paths replaced, members in their order; binary members as they were. The new archive
    replaces the old one whole."""
    with tempfile.TemporaryDirectory() as work:
        unpacked = Path(work) / "unpacked"
        with tarfile.open(file, "r:gz") as tar:
            members = tar.getmembers()
            tar.extractall(unpacked, filter="data")
        for member in members:
            if member.isfile():
                with contextlib.suppress(UnicodeDecodeError):  # binary: kept as it was
                    rewrite(unpacked / member.name, names)
        packed = Path(work) / "packed.tgz"
        with tarfile.open(packed, "w:gz") as tar:
            for member in members:
                tar.add(unpacked / member.name, arcname=member.name, recursive=False)
        shutil.move(packed, file)


def rewrite_history(file: Path, names: Mapping[str, str]) -> None:
    """Replace the paths in every text value of every table of a SQLite file, in one
    transaction; then rebuild the file (VACUUM: no old value left in its free space) and close
    it, which folds a write-ahead log into the file, so the file alone holds the rewrite."""
    with contextlib.closing(sqlite3.connect(file)) as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                rows = db.execute(
                    f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\''
                ).fetchall()
                for rowid, value in rows:
                    new = portable(value, names)
                    if new != value:
                        db.execute(
                            f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (new, rowid)
                        )
        db.commit()
        db.execute("VACUUM")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--replace", action="append", default=[], metavar="PATH=NAME", help="also replace PATH"
    )
    args = parser.parse_args(argv)
    names = default_names()
    for item in args.replace:
        path, sep, name = item.partition("=")
        if not sep or not path:
            parser.error(f"--replace {item!r}: expected PATH=NAME")
        names[path] = name
    for file in args.files:
        rewrite(file, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
