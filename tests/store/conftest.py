"""The store's tests run on both backends: SQLite (a file) and a real PostgreSQL server.

Without PostgreSQL's binaries the PostgreSQL cases skip and say why, unless
PERFGATE_REQUIRE_POSTGRES=1 (CI sets it), when they fail instead: CI cannot skip them silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from perfgate.store import close_history, open_history

from .postgres import (
    fresh_database,
)

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a new, empty history on the test's backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'history.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    with fresh_database(server) as url:
        yield url


@pytest.fixture
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    """An open history on the test's backend."""
    factory = open_history(db_url)
    yield factory
    close_history(factory)


@pytest.fixture
def history(db_url: str) -> str:
    """A history at this perfgate's schema on the test's backend, closed again (WAL folded)."""
    close_history(open_history(db_url))
    return db_url
