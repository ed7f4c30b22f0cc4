"""perfgate.store.history: open, yield, always dispose, and word database failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from perfgate.errors import ConfigError, InfrastructureError, PerfgateError
from perfgate.store import history, list_runs


@pytest.fixture
def disposed(monkeypatch: pytest.MonkeyPatch) -> list[Engine]:
    """The engines disposed while the test runs."""
    seen: list[Engine] = []
    original = Engine.dispose

    def dispose(self: Engine, close: bool = True) -> None:
        seen.append(self)
        original(self, close)

    monkeypatch.setattr(Engine, "dispose", dispose)
    return seen


def test_it_creates_and_migrates_a_history_and_disposes_the_engine(
    tmp_path: Path, disposed: list[Engine]
) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'history.db'}"
    with history(url) as sessions, sessions() as session:
        assert list_runs(session) == []
        engine = sessions.kw["bind"]
    assert (tmp_path / "new" / "history.db").is_file()
    assert engine in disposed


def test_a_reader_refuses_a_history_that_is_not_there_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing.db"
    with (
        pytest.raises(ConfigError, match=f"no history at {path}"),
        history(f"sqlite:///{path}", existing=True),
    ):
        pass
    assert not path.exists()


def test_a_database_failure_in_the_block_is_one_line_naming_the_file(
    tmp_path: Path, disposed: list[Engine]
) -> None:
    path = tmp_path / "history.db"
    with pytest.raises(PerfgateError) as caught, history(f"sqlite:///{path}") as sessions:
        engine = sessions.kw["bind"]
        with sessions() as session:
            session.execute(text("SELECT * FROM no_such_table"))
    assert str(path) in str(caught.value) and "no such table" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert engine in disposed


def test_a_failure_while_writing_that_is_not_the_databases_passes_through(
    tmp_path: Path, disposed: list[Engine]
) -> None:
    with pytest.raises(OSError), history(f"sqlite:///{tmp_path / 'history.db'}") as sessions:
        engine = sessions.kw["bind"]
        raise PermissionError("the report's folder")  # the caller words its own files
    assert engine in disposed


def test_a_locked_history_is_an_infrastructure_error(tmp_path: Path) -> None:
    with (
        pytest.raises(InfrastructureError, match="locked by another process"),
        history(f"sqlite:///{tmp_path / 'history.db'}"),
    ):
        raise OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))


def test_a_history_folder_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    path = tmp_path / "file" / "history.db"
    with pytest.raises(ConfigError) as caught, history(f"sqlite:///{path}"):
        pass
    assert str(caught.value).startswith(  # as a run and doctor name it
        f"{tmp_path / 'file'}: is a file, so the history {path} cannot be created under it"
    )
    assert "point the history elsewhere with --db or PERFGATE_DB_URL" in str(caught.value)
