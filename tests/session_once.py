"""Work done once for a whole test session, whichever xdist worker needs it first."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def session_lock(
    config: pytest.Config, factory: pytest.TempPathFactory, name: str
) -> Iterator[Path]:
    """Hold NAME's lock in the session's temporary root, the folder every worker's own
    temporary folder sits in, and yield that root: the first worker in does the work there,
    the others wait for the lock and find it done."""
    root = factory.getbasetemp()
    if hasattr(config, "workerinput"):
        root = root.parent  # the session's temporary root, holding each worker's own
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        yield root
