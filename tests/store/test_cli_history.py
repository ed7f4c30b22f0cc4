"""`perfgate history list/show/export` and `perfgate db upgrade/current`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

from perfgate.cli import main
from perfgate.errors import ExitCode
from perfgate.gate.verdict import Status
from perfgate.results import RunContext
from perfgate.store import close_history, inspect_history, open_history, record_run
from perfgate.store.schema import head_revision

from ..factories import measurement, record
from .test_migrations import engine_for, migrate


def fill(url: str) -> list[int]:
    sessions = open_history(url)
    contexts = [
        (RunContext("aaa", "main"), Status.PASS),
        (RunContext("bbb", "fast-verify", "41", "https://ci/7"), Status.REGRESSION),
        (RunContext("ccc", "fast-verify", "41"), Status.PASS),
    ]
    with sessions.begin() as session:
        ids = [
            record_run(session, replace(record(measurement(), status), context=context))
            for context, status in contexts
        ]
    close_history(sessions)
    return ids


def perfgate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert err == "" or code != 0, err
    return code, out


def test_history_list_filters(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = fill(db_url)
    code, out = perfgate(capsys, "history", "list", "--db", db_url, "--branch", "fast-verify")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == [
        str(i) for i in ids[1:]
    ]
    _, out = perfgate(capsys, "history", "list", "--db", db_url, "--status", "regression")
    assert len(out.splitlines()) == 2 and "regression" in out.splitlines()[1]
    _, out = perfgate(capsys, "history", "list", "--db", db_url, "--pr", "41", "--json")
    runs = json.loads(out)
    assert [r["id"] for r in runs] == ids[1:]
    assert runs[0]["context"]["ci_url"] == "https://ci/7"


def test_history_show_prints_one_run_fully(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = fill(db_url)
    code, out = perfgate(capsys, "history", "show", str(ids[1]), "--db", db_url)
    assert code == 0
    assert out.startswith(f"run #{ids[1]}: tiny on cpu (embedded), regression")
    for expected in ("commit bbb", "PR 41", "https://ci/7", "torch = 2.13.0+cpu",
                     "spec  verify_ms", "plain output_tok_s", "spec  verify", "output_tok_s     regression"):  # fmt: skip
        assert expected in out
    _, out = perfgate(capsys, "history", "show", str(ids[0]), "--db", db_url, "--json")
    run = json.loads(out)
    assert run["spec"]["phases"][0] == {
        "mode": "spec", "phase": "draft", "repeat": 0, "cycles": 40,
        "median_ms": 1.0, "mean_ms": 1.0, "p90_ms": 1.1,
    }  # fmt: skip
    assert run["samples"]["speedup"][0] == pytest.approx(1.2) and run["equivalence"]["ok"]
    assert main(["history", "show", "999", "--db", db_url]) == ExitCode.BAD_INPUT


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (("show", "99999999999999999999999"), "argument ID: '99999999999999999999999' is not a run id"),
        (("show", "-1"), "argument ID: '-1' is not a run id: a whole number from 1 to "),
        (("list", "--limit", "99999999999999999999999"), "argument --limit: '99999999999999999999999' is not a number of runs: a whole number from 0 to 9223372036854775807"),
        (("list", "--limit", "-1"), "argument --limit: '-1' is not a number of runs"),
    ],
)  # fmt: skip
def test_a_run_id_or_limit_the_history_cannot_hold_is_refused(
    db_url: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], refused: str
) -> None:
    fill(db_url)
    with pytest.raises(SystemExit) as caught:
        main(["history", *args, "--db", db_url])
    assert caught.value.code == ExitCode.BAD_INPUT
    assert refused in capsys.readouterr().err


def test_history_export_json_lines_and_array(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = fill(db_url)
    out_file = tmp_path / "runs.jsonl"
    code, _ = perfgate(capsys, "history", "export", "--db", db_url, "--out", str(out_file))
    lines = out_file.read_text().splitlines()
    assert code == 0 and [json.loads(line)["id"] for line in lines] == ids
    assert json.loads(lines[1])["verdicts"][0]["status"] == "regression"
    assert not (tmp_path / "runs.jsonl.partial").exists()
    _, out = perfgate(capsys, "history", "export", "--db", db_url, "--json", "--branch", "main")
    assert [r["id"] for r in json.loads(out)] == ids[:1]
    _, out = perfgate(capsys, "history", "export", "--db", db_url, "--json", "--pr", "99")
    assert json.loads(out) == []


@pytest.mark.parametrize(
    ("out", "problem"),
    [
        ("", "--out: is empty: it names no file; give --out a file's path"),
        ("folder", "folder: is a folder, but --out names a file to write; name a file in it"),
        ("file/runs.jsonl", "file: is a file, so --out file/runs.jsonl cannot be created under"),
    ],
)
def test_history_export_refuses_an_out_path_it_cannot_write(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    out: str,
    problem: str,
) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    fill(url)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("kept")
    assert main(["history", "export", "--db", url, "--out", out]) == ExitCode.BAD_INPUT
    assert capsys.readouterr().err.startswith(f"perfgate: error: {problem}")
    assert list((tmp_path / "folder").iterdir()) == []
    assert (tmp_path / "file").read_text() == "kept"


def test_db_upgrade_under_a_file_names_it_as_a_run_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("kept")
    url = f"sqlite:///{tmp_path / 'file' / 'h.db'}"
    assert main(["db", "upgrade", "--db", url]) == ExitCode.BAD_INPUT
    assert capsys.readouterr().err == (
        f"perfgate: error: {tmp_path / 'file'}: is a file, so the history "
        f"{tmp_path / 'file' / 'h.db'} cannot be created under it; move that file away, or point "
        "the history elsewhere with --db or PERFGATE_DB_URL\n"
    )
    assert (tmp_path / "file").read_text() == "kept"


def test_db_current_and_upgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    migrate(db_url, "0001")
    code, out = perfgate(capsys, "db", "current", "--db", db_url)
    assert code == 0 and "schema revision 0001 (older than" in out
    code, out = perfgate(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"schema revision 0001 -> {head_revision()}" in out
    code, out = perfgate(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and "already the newest" in out
    code, out = perfgate(capsys, "db", "current", "--db", db_url)
    assert code == 0 and "the newest this perfgate knows" in out
    with engine_for(db_url) as engine, engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    assert main(["db", "current", "--db", db_url]) == ExitCode.BAD_INPUT
    assert main(["db", "upgrade", "--db", db_url]) == ExitCode.BAD_INPUT
    assert "newer perfgate" in capsys.readouterr().err
    assert inspect_history(db_url).current == "9999"


def test_history_show_says_what_the_engines_own_counters_said() -> None:
    """A run with `engine_metrics = true`: the probe's time over SGLang's device timer per
    phase, then each counter's growth, as recorded; a run without them shows no such part."""
    from perfgate.commands.history import render_run

    counters = {
        "probe_over_engine.verify": 1.042,
        "probe_over_engine.draft": 1.31,
        'sglang:spec_device_time_seconds_total{category="target_verify"}': 0.48,
    }
    plain = measurement()
    with_counters = replace(plain, spec=replace(plain.spec, engine_metrics=counters))
    lines = render_run(record(with_counters))
    part = lines[lines.index("  engine's own counters over the repeats (engine_metrics):") :]
    assert part[1].split() == ["spec", "draft", "1.31", *_TIMER_WORDS]
    assert part[2].split() == ["spec", "verify", "1.042", *_TIMER_WORDS]
    counter = 'sglang:spec_device_time_seconds_total{category="target_verify"} = 0.48'
    assert part[3] == f"    spec  {counter}"
    assert len(part) == 4 or part[4].startswith("  verdicts")
    assert not any("engine's own counters" in line for line in render_run(record(plain)))


_TIMER_WORDS = ["(the", "probe's", "ms", "over", "the", "engine's", "device", "timer)"]


@pytest.mark.parametrize("broken", ["syntax", "folder"])
def test_a_broken_config_found_here_is_an_error_not_the_default_history(
    broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that would write to the default history where no config is found must not
    write there past a config it found and could not read: the runs would land in a history
    nobody reads."""
    monkeypatch.delenv("PERFGATE_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "perfgate.toml"
    if broken == "syntax":
        config.write_text('[perfgate]\nhistory = "sqlite:///shared/h.db"\noops = = 1\n')
    else:
        config.mkdir()
    for args in (["db", "upgrade"], ["history", "list"], ["report"]):
        assert main(args) == ExitCode.BAD_INPUT, args
        err = capsys.readouterr().err
        assert f"{config}:" in err, err
    assert not (tmp_path / ".perfgate").exists()


def test_without_a_config_the_history_is_the_default_file_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PERFGATE_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["db", "upgrade"]) == 0, capsys.readouterr().err
    assert (tmp_path / ".perfgate" / "history.db").is_file()
