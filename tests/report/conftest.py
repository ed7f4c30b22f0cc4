"""The report's tests that read a history run on both backends, with the store's fixtures."""

from __future__ import annotations

from ..store.conftest import backend, db_url, postgres_server, sessions

__all__ = ["backend", "db_url", "postgres_server", "sessions"]
