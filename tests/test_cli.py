"""The command line: help, the dry run of the server commands, exit codes."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest

from perfgate.cli import build_parser, main
from perfgate.commands import COMMANDS
from perfgate.errors import ConfigError
from perfgate.settings import OPTIONS, Settings, add_options, settings_from

from .conftest import REPO, run_perfgate, write_config
from .in_process import perfgate_main


def test_help_lists_the_commands(capsys) -> None:  # type: ignore[no-untyped-def]
    try:
        main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    for command in ("run", "servers", "baseline", "report", "history"):
        assert f"    {command} " in out
    assert "75  inconclusive" in out


def test_version_prints_the_installed_version() -> None:
    result = run_perfgate("--version", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"perfgate {metadata.version('perfgate')}\n"
    assert re.fullmatch(r"perfgate \d+\.\d+\.\d+\S*\n", result.stdout)


def test_dry_run_prints_both_servers_of_each_scenario() -> None:
    result = perfgate_main("servers", "--dry-run", "--scenario", "llama33-70b-eagle3-tp8", cwd=REPO)
    assert result.returncode == 0, result.stderr
    plain, spec = result.stdout.strip().splitlines()
    spec_words, plain_words = shlex.split(spec), shlex.split(plain)
    assert "NCCL_PROTO=LL" in spec_words and "NCCL_PROTO=LL" in plain_words
    assert spec_words[spec_words.index("-m") + 1] == "sglang.launch_server"
    for flag, value in [
        ("--speculative-algorithm", "EAGLE3"),
        ("--speculative-num-steps", "2"),
        ("--speculative-eagle-topk", "1"),
        ("--speculative-num-draft-tokens", "3"),
        ("--tp-size", "8"),
        ("--max-running-requests", "8"),
    ]:
        assert spec_words[spec_words.index(flag) + 1] == value
    assert "--speculative-algorithm" not in plain_words
    # Fairness: the twin gets the same knobs, speculative flags aside.
    assert plain_words[plain_words.index("--max-running-requests") + 1] == "8"


def test_engine_override(tmp_path: Path) -> None:
    result = perfgate_main(
        "servers",
        "--dry-run",
        "--engine",
        "embedded",
        "--scenario",
        "llama31-8b-eagle3-tp1",
        cwd=REPO,
    )
    assert result.returncode == 0
    assert all("-m perfgate.engines.embedded.server" in line for line in result.stdout.splitlines())
    bad = perfgate_main("servers", "--dry-run", "--engine", "vllm", cwd=REPO)
    assert bad.returncode == 64 and "invalid choice: 'vllm'" in bad.stderr


HEAVY = ("sqlalchemy", "alembic", "numpy", "jinja2", "httpx", "torch", "safetensors")
_IMPORTS_AFTER = """
import sys
from perfgate.cli import main
from perfgate.commands import COMMANDS

heavy = {heavy!r}
cases = [["--help"], ["--version"]] + [[c.name, "--help"] for c in COMMANDS]
for argv in cases if {every} else cases[:2]:
    try:
        main(argv)
    except SystemExit:
        pass
    loaded = sorted(name for name in heavy if name in sys.modules)
    print(" ".join(argv), "->", ",".join(loaded) or "none", file=sys.stderr)
"""


def _imports_after(every: bool) -> list[str]:
    import subprocess
    import sys

    script = _IMPORTS_AFTER.format(heavy=HEAVY, every=every)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_help_and_version_import_no_heavy_library() -> None:
    assert _imports_after(every=False) == ["--help -> none", "--version -> none"]


def test_each_commands_help_imports_no_heavy_library() -> None:
    lines = _imports_after(every=True)
    assert all(line.endswith("-> none") for line in lines), lines
    assert len(lines) == 2 + len(COMMANDS)


def test_every_command_is_listed_and_has_register_and_run(capsys) -> None:  # type: ignore[no-untyped-def]
    import importlib

    try:
        main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    parser = build_parser(every=True)  # every module's flags, declared together
    for command in COMMANDS:
        assert f"    {command.name} " in out
        module = importlib.import_module(command.module)
        assert callable(module.register) and callable(module.run)
    assert parser.parse_args(["history", "list", "--limit", "3"]).limit == 3


def test_a_command_line_resolves_the_shared_options_once(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PERFGATE_DB_URL", "sqlite:///from-env.db")
    monkeypatch.setenv("PERFGATE_PROFILE", "h200x8")
    monkeypatch.chdir(tmp_path)
    args = build_parser("doctor").parse_args(["doctor", "--scenario", "a", "--scenario", "b"])
    settings = settings_from(args)
    assert settings.scenarios == ("a", "b") and settings.profile == "h200x8"
    assert settings.history_url == f"sqlite:///{tmp_path / 'from-env.db'}"
    given = settings_from(build_parser("doctor").parse_args(["doctor", "--db", "sqlite:///x.db"]))
    assert given.history_url == f"sqlite:///{tmp_path / 'x.db'}"  # --db before the variable


def test_the_history_url_falls_back_to_the_config_then_the_default(
    monkeypatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("PERFGATE_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Settings().history_url == f"sqlite:///{tmp_path / '.perfgate' / 'history.db'}"
    write_config(tmp_path)  # history = "sqlite:///history.db", beside the config
    assert Settings().history_url == f"sqlite:///{tmp_path / 'history.db'}"
    missing = Settings(config=str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError):
        _ = missing.history_url  # a config named but absent is an error, not the default


def test_the_plugin_and_perfgate_run_share_the_declarations() -> None:
    flags: list[str] = []
    add_options(lambda flag, **_: flags.append(flag), flag_prefix="--perfgate-")
    assert flags == [f"--perfgate-{option.name}" for option in OPTIONS]
    run_args = build_parser("run").parse_args(["run", "--no-gate", "--scenario", "s"])
    settings = settings_from(run_args, environ={})
    assert settings.scenarios == ("s",)
    assert settings.gate is False


def test_each_servers_invocation_gets_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from perfgate.engines import launch
    from perfgate.probe import DIR_VARIABLE

    used: list[tuple[Path, str]] = []

    @contextmanager
    def launched(command, log_path, *args, **kwargs):  # type: ignore[no-untyped-def]
        used.append((log_path, command.env[DIR_VARIABLE]))
        ended = SimpleNamespace(poll=lambda: 0)  # the server stops at once
        yield SimpleNamespace(base_url=command.base_url, exit_code=lambda: 0, process=ended)

    monkeypatch.setattr(launch, "running_server", launched)
    write_config(tmp_path)
    for _ in range(2):  # the same second, the same process: still two folders
        result = perfgate_main("servers", "--mode", "plain", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    (first_log, first_probe), (second_log, second_probe) = used
    assert first_log.parent != second_log.parent and first_probe != second_probe
    for log, probe in used:
        assert log.parent.parent.parent == tmp_path / ".perfgate" / "servers"
        assert log.parent.parent.is_dir() and Path(probe).parent == log.parent  # made here


def test_training_or_exporting_without_the_engines_extra_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    absent = ("torch", "safetensors")
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in absent else find_spec(name, *a),
    )
    done = perfgate_main("embedded", "train", "--out", str(tmp_path / "models"), cwd=tmp_path)
    assert done.returncode == 64, done.stderr
    assert "perfgate embedded train: the embedded engine needs torch and safetensors" in (
        done.stderr
    )
    assert "pip install 'perfgate[embedded]'" in done.stderr
    assert not (tmp_path / "models").exists()
    out = tmp_path / "export"
    done = perfgate_main("embedded", "export", "perfgate/llama-tiny", str(out), cwd=tmp_path)
    assert done.returncode == 64, done.stderr
    assert "perfgate embedded export: the embedded engine needs torch and safetensors" in (
        done.stderr
    )
    assert not out.exists()


def test_an_unexpected_error_is_a_bug_with_its_own_code_never_a_regression(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A crash must not exit 1, the regression's code, which CI and the scripts that run
    # perfgate (benchmarks/plan_accuracy.py's record) read as a measured verdict.
    from perfgate.commands import history

    def crash(*_: object) -> int:
        raise ValueError("invalid literal for int() with base 10: 'GPU 0'")

    monkeypatch.setattr(history, "run", crash)
    done = perfgate_main("history", "list", cwd=tmp_path)
    assert done.returncode == 70
    assert "Traceback (most recent call last)" in done.stderr
    assert "ValueError: invalid literal for int() with base 10: 'GPU 0'" in done.stderr
    assert done.stderr.rstrip().endswith(
        "perfgate: internal error: `perfgate history` failed unexpectedly (ValueError: invalid"
        " literal for int() with base 10: 'GPU 0'); this is a bug in perfgate, not a verdict:"
        " please report it with the traceback"
    )
    assert "70  internal error" in build_parser().format_help()  # the help's table says so
