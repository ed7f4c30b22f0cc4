"""Folders of their own: what a session, a sweep, a profile or a server writes never mixes with
what another one writes, however close together they start.

A folder is named after the moment (UTC, to the second) and, for a session, its process; it is
created here and only here, so a name that is taken gets the next free suffix (``-2``...).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from perfgate.errors import InfrastructureError

RUNS = Path(".perfgate") / "runs"
_TRIES = 1000


def stamp(moment: datetime | None = None) -> str:
    """The moment (default: now) as folders are named: ``20261130T120000``."""
    return (moment or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")


def new_folder(parent: Path, name: str) -> Path:
    """Create and return the folder ``parent/name``, or ``name-2``, ``name-3``... when taken."""
    parent.mkdir(parents=True, exist_ok=True)
    for index in range(1, _TRIES + 1):
        folder = parent / (name if index == 1 else f"{name}-{index}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise InfrastructureError(f"{parent}: {_TRIES} folders named {name}-N exist; clean it up")


def session_folder(root: Path, moment: datetime | None = None) -> Path:
    """A new folder for one session's files under ``root/.perfgate/runs``."""
    return new_folder(root / RUNS, process_folder_name(moment))


def process_folder(root: Path) -> Path:
    """The folder (not made yet) of this process's one sweep or profile under ``root``."""
    return root / RUNS / process_folder_name()


def process_folder_name(moment: datetime | None = None) -> str:
    return f"{stamp(moment)}-{os.getpid()}"
