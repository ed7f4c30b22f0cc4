"""`perfgate report`: from a history to one HTML file; filters; refusals in one line."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.errors import ExitCode
from perfgate.store import close_history, open_history, record_run

from ..conftest import TINY_SCENARIO, write_config
from .history import stepped_history, sweep_history


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    sessions = open_history(url)
    with sessions.begin() as session:
        for record in [*stepped_history(runs=10), *sweep_history()]:
            record_run(session, record)
    close_history(sessions)
    return url


def data_of(path: Path) -> dict:  # type: ignore[type-arg]
    html = path.read_text()
    found = re.search(r'id="perfgate-data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_report_writes_one_self_contained_file(
    history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reports" / "index.html"
    assert main(["report", "--db", history_url, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    html = out.read_text()
    assert "var uPlot=" in html and "perfgateReport" in html
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=""", html)  # nothing fetched
    assert [p.name for p in out.parent.iterdir()] == ["index.html"]  # no temporary left
    data = data_of(out)
    assert len(data["runs"]["id"]) == 13 and len(data["sweeps"]) == 1


def test_report_filters_by_scenario_branch_and_profile(history_url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--db", history_url, "--out", str(out), "--branch", "feature/x"]) == 0
    assert data_of(out)["branches"] == ["feature/x"]
    assert main(["report", "--db", history_url, "--out", str(out), "--scenario", "tiny",
                 "--profile", "cpu"]) == 0  # fmt: skip
    assert [g["scenario"] for g in data_of(out)["groups"]] == ["tiny"]


def test_a_scenario_in_neither_config_nor_history_is_refused_in_one_line(
    history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, TINY_SCENARIO.replace("tiny", "fresh"))
    out = tmp_path / "r.html"
    code = main(["report", "--db", history_url, "--config", str(config), "--out", str(out),
                 "--scenario", "nope"])  # fmt: skip
    assert code == ExitCode.BAD_INPUT
    assert capsys.readouterr().err == (
        "perfgate: error: --scenario: no scenario 'nope' in the config or the history; "
        "choose one of: fresh, sweep-s1, sweep-s2, sweep-s3, tiny\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "value", "error"),
    [
        ("--branch", "nope", "no run on branch 'nope' in the history; choose one of: feature/x, main"),
        ("--profile", "h200x8", "no runner profile 'h200x8' in the history; choose one of: cpu"),
    ],
)  # fmt: skip
def test_a_branch_or_profile_that_nothing_holds_is_refused_in_one_line(
    history_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    error: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # no config: the history alone says what exists
    out = tmp_path / "r.html"
    assert main(["report", "--db", history_url, "--out", str(out), flag, value]) == 64
    assert capsys.readouterr().err == f"perfgate: error: {flag}: {error}\n"
    assert not out.exists()


def test_a_selection_that_matches_no_run_says_so(
    history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, TINY_SCENARIO.replace("tiny", "fresh"))
    (tmp_path / "baselines" / "h200x8").mkdir(parents=True)  # a profile with a baseline folder
    out = tmp_path / "r.html"
    for flags, selection in [
        (["--scenario", "fresh"], "scenario 'fresh'"),
        (["--profile", "h200x8"], "runner profile 'h200x8'"),
        (["--scenario", "sweep-s1", "--branch", "feature/x"], "scenario 'sweep-s1', branch 'feature/x'"),
    ]:  # fmt: skip
        argv = ["report", "--db", history_url, "--config", str(config), "--out", str(out)]
        assert main([*argv, *flags]) == 0
        printed = capsys.readouterr()
        assert printed.out == f"wrote {out}: no recorded run matches {selection}\n"
        assert printed.err == ""
        assert data_of(out)["groups"] == []
        assert f"No recorded run matches {selection}." in html.unescape(out.read_text())


def test_report_links_through_a_given_repository(history_url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    repo = "https://git.example.org/team/perfgate"
    assert main(["report", "--db", history_url, "--out", str(out), "--repo-url", repo + "/"]) == 0
    assert f'href="{repo}/commit/{9:040x}"' in out.read_text()


def test_a_repository_that_is_not_a_web_url_is_refused_in_one_line(
    history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    code = main(["report", "--db", history_url, "--out", str(out), "--repo-url", "javascript:x"])
    assert code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfgate: error: --repo-url: 'javascript:x' is not an http(s) URL;")
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(
    ("out", "problem"),
    [
        ("", "--out: is empty: it names no file; give --out a file's path"),
        ("folder", "folder: is a folder, but --out names a file to write; name a file in it"),
        ("file/r.html", "file: is a file, so --out file/r.html cannot be created under it"),
    ],
)
def test_an_out_path_that_cannot_be_written_is_refused_in_one_line(
    history_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    out: str,
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("kept")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["report", "--db", history_url, "--out", out]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"perfgate: error: {problem}") and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert list((tmp_path / "folder").iterdir()) == []
