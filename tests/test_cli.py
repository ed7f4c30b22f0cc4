"""The command line: help, the dry run of the server commands, exit codes."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

from perfgate.cli import main

from .conftest import REPO, run_perfgate


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
    result = run_perfgate("servers", "--dry-run", "--scenario", "llama33-70b-eagle3-tp8", cwd=REPO)
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
    result = run_perfgate(
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
    bad = run_perfgate("servers", "--dry-run", "--engine", "vllm", cwd=REPO)
    assert bad.returncode == 64 and "invalid choice: 'vllm'" in bad.stderr
