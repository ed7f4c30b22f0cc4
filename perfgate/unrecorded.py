"""Runs measured but not recorded: kept whole in a file that `perfgate history import` loads.

The preflight proves the history takes writes, but a record can still fail after the
measuring (the disk filled, the server went away, the file was made immutable meanwhile). The
measurement is not lost: its runs are written as `perfgate history export` writes them (JSON
lines, oldest first) to ``.perfgate/unrecorded/<name>.jsonl`` beside the config, or to the
temporary folder where that one cannot be written.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.files import write_text_atomically
from perfgate.results import RunRecord
from perfgate.store.run_dicts import run_to_dict

UNRECORDED = Path(".perfgate") / "unrecorded"


class NotRecorded(PerfgateError):
    """A record failed: the cause's exit code, and where the measurement is kept."""

    def __init__(self, cause: PerfgateError, kept: Path | None, why_not_kept: str = "") -> None:
        self.exit_code = cause.exit_code
        self.detail = cause.detail
        self.kept = kept
        if kept is not None:
            told = (
                f"{cause}; nothing was recorded: the measurement is kept in {kept}; once the "
                f"history takes writes, load it with `perfgate history import {kept}`"
            )
        else:
            told = f"{cause}; nothing was recorded, and the measurement could not be kept either"
            told += f" ({why_not_kept})" if why_not_kept else ""
        super().__init__(told)


def not_recorded(
    cause: PerfgateError, root: Path, name: str, records: Sequence[RunRecord]
) -> NotRecorded:
    """Keep `records` in a file under `root` (else the temporary folder); say so in the error."""
    text = "".join(json.dumps(run_to_dict(record)) + "\n" for record in records)
    why = ""
    for folder in (root / UNRECORDED, Path(tempfile.gettempdir()) / "perfgate-unrecorded"):
        try:
            return NotRecorded(cause, write_text_atomically(folder / f"{name}.jsonl", text))
        except OSError as error:
            why = f"{folder}: {error.strerror}"
    return NotRecorded(cause, None, why)
