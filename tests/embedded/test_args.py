"""The server's flags: SGLang's names, refusals with exit code 64 and a fix."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from perfgate.engines.embedded.args import build_parser, check_args, parse_args
from perfgate.engines.embedded.worker import SpecParams
from perfgate.errors import ConfigError, ExitCode

from .common import DRAFT, SERVER_MODULE, TARGET, server_env

SPEC = [
    "--speculative-algorithm",
    "eagle3",
    "--speculative-draft-model-path",
    DRAFT,
]


def _args(*flags: str) -> argparse.Namespace:
    return parse_args(["--model-path", TARGET, *flags])


def test_sglang_flags_parse_and_resolve() -> None:
    args = _args(*SPEC, "--speculative-num-steps", "2", "--tp", "1", "--port", "31000")
    assert check_args(args) == SpecParams(2, 1, 3)
    assert args.speculative_algorithm == "EAGLE3"
    assert (args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (1, 3)
    assert args.max_running_requests == 48 and args.random_seed == 0
    assert (args.host, args.port, args.tp_size) == ("127.0.0.1", 31000, 1)


def test_plain_server_has_no_spec_params() -> None:
    args = _args("--max-running-requests", "8")
    assert check_args(args) is None and args.max_running_requests == 8


def test_unknown_flags_exit_64_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _args("--speculative-draft-steps", "3")
    assert caught.value.code == ExitCode.BAD_INPUT
    assert "unrecognized arguments: --speculative-draft-steps" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--tp-size", "2"], "--tp-size: 2"),
        (["--speculative-algorithm", "EAGLE3"], "--speculative-draft-model-path"),
        ([*SPEC, "--speculative-eagle-topk", "4", "--speculative-num-steps", "3"], "tree"),
        (["--debug-verify-delay-ms", "-1"], "--debug-verify-delay-ms"),
    ],
)
def test_bad_combinations_are_refused(flags: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_args(_args(*flags))


def test_help_documents_the_debug_flag() -> None:
    assert "--debug-verify-delay-ms" in build_parser().format_help()


def test_bad_combination_exits_64_with_one_line() -> None:
    command = [sys.executable, "-m", SERVER_MODULE, "--model-path", TARGET, "--tp-size", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=server_env())
    assert done.returncode == ExitCode.BAD_INPUT
    assert done.stderr.strip().splitlines() == [
        "error: --tp-size: 2: the embedded engine runs on one device; use --tp-size 1 "
        "(tensor parallelism needs SGLang)"
    ]
