"""The tests' PostgreSQL server starts wherever TMPDIR points, even where its user cannot go."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import sqlalchemy

from .postgres import REQUIRE_ENV, PostgresUnavailable, running_postgres


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user, the server runs as us")
def test_a_temporary_folder_only_root_can_enter_still_hosts_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `TMPDIR=$(mktemp -d) scripts/test` under root makes it: the server's user (postgres)
    # cannot enter it, and initdb failed there, so every PostgreSQL case skipped or failed.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    try:
        with running_postgres() as server:
            assert not server.root.is_relative_to(private)
            engine = sqlalchemy.create_engine(server.url())
            try:
                with engine.connect() as connection:
                    assert connection.execute(sqlalchemy.text("select 1")).scalar() == 1
            finally:
                engine.dispose()
    except PostgresUnavailable as why:
        if os.environ.get(REQUIRE_ENV) == "1":
            raise
        pytest.skip(f"PostgreSQL cases skipped: {why}")
    assert not server.root.exists()  # removed with the server
