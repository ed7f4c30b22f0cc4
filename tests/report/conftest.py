"""The report's tests that read a history run on both backends, with the store's fixtures
(the PostgreSQL server itself is tests/conftest.py's, for every test)."""

from __future__ import annotations

from ..store.conftest import backend, db_url, sessions

__all__ = ["backend", "db_url", "sessions"]
