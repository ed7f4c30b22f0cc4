"""The one path from a scenario pair to its records, over stand-ins for the servers."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

import perfgate
from perfgate.config import Scenario, load_config
from perfgate.errors import InfrastructureError
from perfgate.gate import Status
from perfgate.pipeline import ScenarioRun, ServerPair, record_runs
from perfgate.results import ModeResult, RunContext
from perfgate.store import close_history, list_runs, open_history
from perfgate.unrecorded import UNRECORDED, NotRecorded

from .conftest import write_config
from .factories import QueuedMeasurer, measurement, mode_result


class FakeLaunch:
    """Answers measure_mode's calls without a server, counting them."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, Path]] = []
        self.fail = fail

    def __call__(self, scenario: Scenario, mode: str, folder: Path, **kwargs: Any) -> ModeResult:
        self.calls.append((mode, folder))
        if mode == self.fail:
            raise InfrastructureError(f"the {mode} server exited")
        return mode_result(mode, 120.0 if mode == "spec" else 100.0, repeats=scenario.repeats)


@pytest.fixture
def tiny(tmp_path: Path) -> Scenario:
    return load_config(write_config(tmp_path)).scenarios["tiny"]


def test_each_server_of_a_folder_is_measured_once(tiny: Scenario, tmp_path: Path) -> None:
    launch = FakeLaunch()
    servers = ServerPair("cpu", launch=launch)
    timed = servers.server(tiny, "spec", tmp_path / "first")  # a suite timing one server
    first = servers.measure(tiny, tmp_path / "first")
    again = servers.measure(tiny, tmp_path / "run-2")
    assert first.spec is timed and first.profile == "cpu"
    assert launch.calls == [
        ("spec", tmp_path / "first"),
        ("plain", tmp_path / "first"),
        ("spec", tmp_path / "run-2"),  # the speculative server first, then its plain twin
        ("plain", tmp_path / "run-2"),
    ]
    assert first.plain.reuse_key and first.plain.reuse_key == again.plain.reuse_key
    assert servers.measured(tmp_path / "first") == ("spec", "plain")


def test_the_plain_twin_comes_from_its_source_where_it_has_one(
    tiny: Scenario, tmp_path: Path
) -> None:
    launch = FakeLaunch()
    reused = replace(mode_result("plain", 99.0), reused_from=7)
    answers: list[ModeResult | None] = [reused, None]
    servers = ServerPair("cpu", launch=launch, plain_source=lambda s, checked: answers.pop(0))
    assert servers.measure(tiny, tmp_path / "a").plain.reused_from == 7
    assert servers.plain_note is None and [c[0] for c in launch.calls] == ["spec"]
    assert servers.measure(tiny, tmp_path / "b").plain.reused_from is None
    assert servers.plain_note == "no run with the same plain fingerprint within plain_max_age_h"


def test_a_failure_to_measure_is_remembered(tiny: Scenario, tmp_path: Path) -> None:
    launch = FakeLaunch(fail="spec")
    run = ScenarioRun(tiny, tmp_path, ServerPair("cpu", launch=launch))
    with pytest.raises(InfrastructureError, match="spec server exited"):
        run.measurement()
    with pytest.raises(InfrastructureError):
        run.measurements()
    # The speculative server is measured first: its failure launches no plain twin.
    assert isinstance(run.error, InfrastructureError) and launch.calls == [("spec", tmp_path)]


def test_runs_are_recorded_linked_or_kept_when_the_history_refuses(tmp_path: Path) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    run = ScenarioRun(scenario, tmp_path, QueuedMeasurer(measurement(), measurement()))
    run.measure_again()
    run.looks = [[], []]
    records = run.records(RunContext(commit="abc"))
    url = f"sqlite:///{tmp_path / 'history.db'}"
    recorded = record_runs(url, records, tmp_path, "session")
    assert [r.id for r in recorded] == [1, 2]
    sessions = open_history(url)
    try:
        with sessions() as session:
            assert [r.status for r in list_runs(session)] == [Status.PASS, Status.PASS]
    finally:
        close_history(sessions)
    # A database without perfgate's tables refuses the record: the runs are kept in a file.
    empty = sessionmaker(create_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    with pytest.raises(NotRecorded, match="nothing was recorded") as raised:
        record_runs(empty, records, tmp_path, "session")
    kept = tmp_path / UNRECORDED / "session.jsonl"
    assert raised.value.kept == kept and len(kept.read_text().splitlines()) == 2


def test_only_the_plugin_and_the_suites_import_the_pytest_session() -> None:
    package = Path(perfgate.__file__).parent
    importers = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if "perfgate.session" in names:
                importers.append(path.relative_to(package).as_posix())
    assert importers, "the check reads the imports"
    assert {p for p in importers if p != "plugin.py" and not p.startswith("suites/")} == set()
