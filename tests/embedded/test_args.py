"""The server's flags: SGLang's names, refusals with exit code 64 and a fix."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from perfgate.engines.embedded.args import build_parser, check_args, parse_args
from perfgate.engines.embedded.engine import build_worker, graph_runner, load_drafter
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.model import Transformer
from perfgate.engines.embedded.params import CHAIN_ADJUSTED, SpecParams, resolve_spec_params
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker
from perfgate.errors import ConfigError, ExitCode

from ..hang import HANG_S
from .common import CPU, DRAFT, SERVER_MODULE, TARGET, server_env

SPEC = [
    "--speculative-algorithm",
    "eagle3",
    "--speculative-draft-model-path",
    DRAFT,
]


TIMED_WIDTH_2 = ("--debug-time-verify-widths", "2")


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
        (["--tp-size", "0"], "--tp-size: 0"),
        (["--speculative-algorithm", "EAGLE3"], "--speculative-draft-model-path"),
        ([*SPEC, "--speculative-eagle-topk", "4", "--speculative-num-steps", "3"], "required"),
        (["--debug-verify-delay-ms", "-1"], "--debug-verify-delay-ms"),
        ([*SPEC, "--debug-simulate-accept-rate", "1.5"], "not a probability"),
        (["--max-running-requests", "0"], "--max-running-requests"),
        (["--tp-size", "2", "--debug-rank-exit", "2:3:in:kill"], "--debug-rank-exit: names rank 2"),
        (
            [*SPEC, "--speculative-num-steps", "3", "--debug-time-verify-widths", "2,5"],
            "--debug-time-verify-widths: 5: a chain of 3 steps verifies 1 to 4 tokens",
        ),
        (
            [
                *SPEC,
                *("--speculative-num-steps", "2", "--speculative-eagle-topk", "2"),
                *("--speculative-num-draft-tokens", "4", "--debug-time-verify-widths", "2"),
            ],
            "--debug-time-verify-widths: times a chain's verify, not a tree's",
        ),
        (
            [*SPEC, "--speculative-num-steps", "3", *("--tp-size", "2"), *TIMED_WIDTH_2],
            "--debug-time-verify-widths: times one rank's verify",
        ),
    ],
)
def test_bad_combinations_are_refused(flags: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_args(_args(*flags))


def test_help_documents_the_debug_flags() -> None:
    help_text = build_parser().format_help()
    for flag in (
        "--debug-verify-delay-ms",
        "--debug-simulate-accept-rate",
        "--debug-eagle3-feature-layers",
        "--debug-rank-exit",
        "--disable-cuda-graph",
    ):
        assert flag in help_text


def test_spec_params_follow_sglang_rules(caplog: pytest.LogCaptureFixture) -> None:
    assert resolve_spec_params(None, None, None) == SpecParams(5, 4, 8)  # SGLang's Llama choice
    assert resolve_spec_params(2, None, None) == SpecParams(2, 1, 3)
    assert resolve_spec_params(5, 1, 6) == SpecParams(5, 1, 6)
    assert resolve_spec_params(3, 4, 16) == SpecParams(3, 4, 16)
    assert resolve_spec_params(3, 4, 37) == SpecParams(3, 4, 37)  # the whole tree
    assert not caplog.records
    # topk 1 verifies a chain: SGLang adjusts num_draft_tokens, with its warning.
    assert resolve_spec_params(3, 1, 8) == SpecParams(3, 1, 4)
    assert [r.getMessage() for r in caplog.records] == [CHAIN_ADJUSTED]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ((3, 4, 38), ["--speculative-num-draft-tokens: 38", "at most 37"]),
        ((3, 4, None), ["--speculative-num-draft-tokens", "required"]),
        ((0, 1, 1), ["--speculative-num-steps", "at least 1"]),
        ((3, 0, 4), ["--speculative-eagle-topk", "at least 1"]),
        ((3, 2, 0), ["--speculative-num-draft-tokens", "at least 1"]),
        ((None, 1, 4), ["--speculative-num-steps", "set all three"]),
    ],
)
def test_bad_spec_params_are_refused_with_the_flags_to_fix(
    flags: tuple[int | None, int | None, int | None], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_spec_params(*flags)
    for word in words:
        assert word in str(caught.value)


def test_feature_layer_override_parses_three_layers(capsys: pytest.CaptureFixture[str]) -> None:
    assert _args(*SPEC, "--debug-eagle3-feature-layers", "4,2,1").debug_eagle3_feature_layers == (
        4,
        2,
        1,
    )
    with pytest.raises(SystemExit) as caught:
        _args(*SPEC, "--debug-eagle3-feature-layers", "4,2")
    assert caught.value.code == ExitCode.BAD_INPUT
    assert "reads 3 hidden states" in capsys.readouterr().err


def test_bad_combination_exits_64_with_one_line() -> None:
    command = [sys.executable, "-m", SERVER_MODULE, "--model-path", TARGET, "--tp-size", "3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=server_env())
    assert done.returncode == ExitCode.BAD_INPUT
    assert done.stderr.strip().splitlines() == [
        "error: --tp-size: 3 ranks cannot split the 4 attention heads of --model-path; "
        "use a --tp-size that divides 4"
    ]


def test_a_tree_too_large_exits_64_at_launch() -> None:
    command = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        *("--model-path", TARGET, *SPEC),
        *("--speculative-num-steps", "2", "--speculative-eagle-topk", "2"),
        *("--speculative-num-draft-tokens", "9"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=server_env())
    assert done.returncode == ExitCode.BAD_INPUT
    assert done.stderr.strip().splitlines() == [
        "error: --speculative-num-draft-tokens: 9 with --speculative-num-steps 2 and "
        "--speculative-eagle-topk 2: a draft tree holds topk + (num_steps - 1)·topk² = 6 "
        "candidates, so at most 7 tokens (the root included) to verify; use at most 7, or more "
        "steps or a larger topk"
    ]


def test_the_feature_layer_override_reaches_the_drafter(target: Transformer) -> None:
    args = _args(*SPEC, "--debug-eagle3-feature-layers", "4,2,1")
    drafter = load_drafter(args, target, CPU, torch.float32, 1, GraphRunner())
    assert drafter.feature_layers == (4, 2, 1)
    args = _args(*SPEC, "--debug-eagle3-feature-layers", "4,2,9")
    with pytest.raises(ConfigError, match=r"--debug-eagle3-feature-layers: \[9\]"):
        load_drafter(args, target, CPU, torch.float32, 1, GraphRunner())


def test_a_rank_exit_parses_its_rank_batch_point_and_how(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fault = _args("--tp-size", "4", "--debug-rank-exit", "3:5:after:134").debug_rank_exit
    assert (fault.rank, fault.batch, fault.where, fault.code) == (3, 5, "after", 134)
    assert _args("--debug-rank-exit", "1:2:in:kill").debug_rank_exit.code is None
    for bad in ("1:2:during:kill", "0:2:in:kill", "1:2:in:300", "1:x:in:kill"):
        with pytest.raises(SystemExit) as caught:
            _args("--debug-rank-exit", bad)
        assert caught.value.code == ExitCode.BAD_INPUT
        assert "--debug-rank-exit" in capsys.readouterr().err


@pytest.mark.parametrize("server", [SPEC, []], ids=["spec", "plain"])
@pytest.mark.parametrize(
    ("flags", "overlap"), [((), True), (("--disable-overlap-schedule",), False)]
)
def test_the_overlap_schedule_is_on_unless_disabled_as_in_sglang(
    server: list[str], flags: tuple[str, ...], overlap: bool
) -> None:
    args = _args(*server, "--device", "cpu", *flags)
    worker, _ = build_worker(args, check_args(args))
    assert isinstance(worker, EagleWorker if server else PlainWorker)
    assert worker.overlap is overlap


def test_prefill_graphs_are_asked_for_by_sglang_s_flag_and_off_by_default() -> None:
    """--cuda-graph-backend-prefill full captures prefills where CUDA graphs run at all;
    its default, disabled, runs them eagerly; a backend this engine lacks is refused."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    default = graph_runner(_args(), cuda)
    assert (default.mode, default.prefill) == ("cuda", False)
    full = graph_runner(_args("--cuda-graph-backend-prefill", "full"), cuda)
    assert (full.mode, full.prefill) == ("cuda", True)
    off = _args("--cuda-graph-backend-prefill", "full", "--disable-cuda-graph")
    assert graph_runner(off, cuda).mode == "off" and graph_runner(_args(), cpu).mode == "off"
    assert "--cuda-graph-backend-prefill" in build_parser().format_help()
    with pytest.raises(SystemExit):
        _args("--cuda-graph-backend-prefill", "breakable")


def test_the_ranks_rendezvous_never_takes_the_servers_own_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The HTTP port is free until the server listens after loading: the kernel may offer
    it to the rendezvous, which must take another."""
    from perfgate.engines.embedded import engine

    offered = iter([8123, 8123, 8124])

    class Socket:
        def __init__(self, *_: object) -> None:
            self.port = next(offered)

        def __enter__(self) -> Socket:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def bind(self, _: object) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(engine.socket, "socket", Socket)
    assert engine._free_port(avoid=8123) == 8124
