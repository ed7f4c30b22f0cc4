"""The server's command line: SGLang's flag names, checked with SGLang's rules.

Flag mistakes end the process with exit code 64 (``ExitCode.BAD_INPUT``): argparse errors with
its usage line, bad combinations with one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

import torch

from perfgate.engines.embedded import triton_attention
from perfgate.engines.embedded.choices import DEVICES, DTYPE_NAMES, SPEC_ALGORITHMS
from perfgate.engines.embedded.model import ATTENTION_BACKENDS
from perfgate.engines.embedded.model_dirs import LOAD_FORMATS
from perfgate.engines.embedded.params import (
    AUTO_NUM_DRAFT_TOKENS,
    AUTO_NUM_STEPS,
    AUTO_TOPK,
    SpecParams,
    resolve_spec_params,
)
from perfgate.errors import ConfigError, ExitCode
from perfgate.spec import slowdown

PROG = "python -m perfgate.engines.embedded.server"
SPEC_MAX_RUNNING_REQUESTS = 48  # what SGLang sets for speculative servers when unset
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
DELAY_VARIABLE = "PERFGATE_DEBUG_VERIFY_DELAY_MS"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# SGLang's --cuda-graph-backend-prefill choices this engine has (not SGLang's breakable).
PREFILL_GRAPH_BACKENDS = ("full", "disabled")

logger = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for the server's flags, named as in sglang.launch_server."""
    parser = _Parser(
        prog=PROG,
        description="perfgate's embedded engine: a miniature EAGLE-3 deployment serving "
        "SGLang's HTTP API, launched like `python -m sglang.launch_server`.",
    )
    add = parser.add_argument
    add(
        "--model-path",
        required=True,
        help="target model: a shipped name "
        "(perfgate/llama-tiny) or a directory holding config.json [+ model.safetensors]",
    )
    add(
        "--tokenizer-path",
        default=None,
        help="the tokenizer SGLang's clients load, reported by /server_info and /model_info "
        "(default: the model's folder, which holds a byte-level tokenizer.json)",
    )
    add(
        "--served-model-name",
        default=None,
        help="the model's name in /v1/models and /model_info (default: --model-path)",
    )
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, default=30000, help="port to listen on (default 30000)")
    add(
        "--load-format",
        choices=LOAD_FORMATS,
        default="auto",
        help="auto: load the models' weights (perfgate/llama-large's from the cache `perfgate "
        "embedded train --size large` fills); dummy: seed them from the config instead, for "
        "speed measurements only: acceptance and equivalence then mean nothing (as in SGLang, "
        "it applies to the draft model too)",
    )
    add(
        "--dtype",
        choices=("auto", *DTYPES),
        default="auto",
        help="weights and activations; auto: bfloat16 on CUDA, float32 on CPU",
    )
    add(
        "--device",
        choices=DEVICES,
        default="auto",
        help="auto: cuda if available, else cpu",
    )
    add(
        "--tp-size",
        "--tensor-parallel-size",
        dest="tp_size",
        type=int,
        default=1,
        help="tensor parallelism: N processes (rank 0 serves HTTP), each holding 1/N of every "
        "attention and MLP block, on cuda:0..N-1 on CUDA or N CPU processes over gloo "
        "(default 1)",
    )
    add(
        "--max-running-requests",
        type=int,
        default=None,
        help="the most sequences decoding together: a /generate with more prompts runs them in "
        "batches of this size (default: all at once; "
        f"{SPEC_MAX_RUNNING_REQUESTS} for speculative servers, as in SGLang)",
    )
    add(
        "--disable-cuda-graph",
        action="store_true",
        help="run every forward eagerly on CUDA instead of replaying captured CUDA graphs",
    )
    add(
        "--cuda-graph-backend-prefill",
        choices=PREFILL_GRAPH_BACKENDS,
        default="disabled",
        help="full: capture the target's prefill forward in a CUDA graph per batch shape "
        "(batch and padded prompt length; at most 8 shapes of at most 2048 tokens) and "
        "replay it, so that a repeated batch's prefill is queued by one launch, not one per "
        "kernel; disabled (the default): "
        "prefills run eagerly. SGLang 0.5.23 spells it the same, with breakable its default "
        "on CUDA",
    )
    add(
        "--disable-overlap-schedule",
        action="store_true",
        help="keep each step's tokens on the host before queueing the next work, as SGLang "
        "without its overlap scheduler; by default a speculative cycle queues its draft "
        "extend, and a plain server its next step, before the host waits for the tokens",
    )
    add(
        "--enable-torch-compile",
        action="store_true",
        help="compile the decoder layers with torch.compile, fusing the small kernels between "
        "the matrix products (compiling adds seconds to the start; meant for CUDA)",
    )
    add(
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
        default=None,
        help="attention over the KV cache: torch_native (PyTorch's scaled_dot_product_attention) "
        "or triton (a Triton kernel shaped for decoding's few queries; CUDA, needs Triton); "
        "default: triton on CUDA where Triton is installed, else torch_native",
    )
    add("--random-seed", type=int, default=None, help="torch seed (default 0)")
    add(
        "--num-threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's own choice)",
    )
    add("--log-level", type=str.lower, choices=LOG_LEVELS, default="info")
    _add_speculative(parser)
    _add_debugging(parser)
    return parser


def _add_speculative(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--speculative-algorithm",
        type=str.upper,
        choices=SPEC_ALGORITHMS,
        default=None,
        help="EAGLE3 (or EAGLE, the same head) drafts with an EAGLE-3 head; STANDALONE drafts "
        "with a full model; absent: plain decoding",
    )
    add(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        default=None,
        dest="speculative_draft_model_path",
        help="draft model: perfgate/eagle3-llama-tiny, a target model for STANDALONE, or a "
        "directory",
    )
    auto = f"{AUTO_NUM_STEPS}, {AUTO_TOPK}, {AUTO_NUM_DRAFT_TOKENS}"
    add(
        "--speculative-num-steps",
        type=int,
        default=None,
        help=f"draft levels per cycle (all three unset: ({auto}), SGLang's choice for Llama)",
    )
    add(
        "--speculative-eagle-topk",
        type=int,
        default=None,
        help="branches per draft level: 1 drafts a chain, more draft a tree (default 1 when "
        "--speculative-num-steps is set)",
    )
    add(
        "--speculative-num-draft-tokens",
        type=int,
        default=None,
        help="tokens per verify pass, the root included: with topk 1 it is num_steps + 1 "
        "(SGLang adjusts it), with a tree the best num_draft_tokens - 1 candidates",
    )


def _add_debugging(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--debug-verify-delay-ms",
        type=float,
        default=None,
        help="debugging: make every verify pass take this many milliseconds longer (a sleep "
        "on CPU, a calibrated spin kernel on CUDA), to inject a verify regression; default: "
        f"${DELAY_VARIABLE} or 0. The variable reaches a server launched by perfgate unchanged, "
        "so a test can slow verify down without changing the scenario",
    )
    add(
        slowdown.FLAG,
        default=None,
        metavar="PHASE=FRACTION[,...]",
        help="validating the gate: make each named phase of a speculative server take this "
        "fraction of its own time longer (phases: " + ", ".join(slowdown.PHASES) + "; e.g. "
        "verify=0.02 for a 2%% slower verify): a wait inside the phase, on CUDA a GPU "
        f"busy-wait sized from the phase's measured time; default: ${slowdown.VARIABLE} or "
        "off. Named in the run's fingerprint, so such a run is never approved as a baseline; "
        "a gating run in CI refuses it",
    )
    add(
        "--debug-simulate-accept-rate",
        type=float,
        default=None,
        metavar="RATE",
        help="benchmarking: accept each draft token with this probability (0..1) instead of "
        "checking it against the target, SGLang's SGLANG_SIMULATE_ACC_LEN idea per position "
        "(a chain of S drafts then accepts 1 + RATE + ... + RATE^S tokens per cycle); outputs "
        "are no longer the target's greedy ones",
    )
    add(
        "--debug-time-verify-widths",
        type=_ints,
        default=(),
        metavar="W[,W...]",
        help="planning: after the first batch the server decodes past its own warm-up (perfgate's "
        "warm-up), time the verify forward at these chain widths (tokens a sequence, 1 to "
        "--speculative-num-draft-tokens) and at its own, on that batch's state; "
        "/server_info's internal_states report the milliseconds as verify_ms_by_width. A chain "
        "(--speculative-eagle-topk 1) on one rank only",
    )
    add(
        "--debug-rank-exit",
        type=_rank_exit,
        default=None,
        metavar="RANK:BATCH:WHERE:HOW",
        help="testing: rank RANK (1 to --tp-size - 1) of a tensor-parallel server ends itself "
        "in the BATCH-th batch it decodes (counted from 1, the server's own warm-up first): "
        "WHERE is `in` (after the batch's prefill, its collectives half done) or `after` (once "
        "the batch is done, while the server is idle); HOW is an exit code (a crash) or `kill` "
        "(SIGKILL), to test what a rank's failure does",
    )
    add(
        "--debug-eagle3-feature-layers",
        type=_layers,
        default=None,
        metavar="I,J,K",
        help="debugging: feed the EAGLE-3 head these target hidden states instead of those it "
        "was trained on (e.g. 4,2,1 for its own reversed), to inject a wiring bug",
    )


class RankExit(NamedTuple):
    """What ``--debug-rank-exit`` asks: which rank ends itself, in which batch, where in it,
    and how (an exit code; None: SIGKILL)."""

    rank: int
    batch: int
    where: str  # "in": after the batch's prefill; "after": once the batch is done
    code: int | None


RANK_EXIT_POINTS = ("in", "after")


def _rank_exit(text: str) -> RankExit:
    parts = text.split(":")
    usage = f"{text!r} is not RANK:BATCH:in|after:CODE|kill (e.g. 1:3:in:kill or 2:4:after:134)"
    if len(parts) != 4 or parts[2] not in RANK_EXIT_POINTS:
        raise argparse.ArgumentTypeError(usage)
    try:
        rank, batch = int(parts[0]), int(parts[1])
        code = None if parts[3] == "kill" else int(parts[3])
    except ValueError:
        raise argparse.ArgumentTypeError(usage) from None
    if rank < 1 or batch < 1 or (code is not None and not 0 <= code <= 255):
        raise argparse.ArgumentTypeError(
            f"{text!r}: RANK must be 1 or more (rank 0 is the server), BATCH 1 or more, CODE 0..255"
        )
    return RankExit(rank, batch, parts[2], code)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of ints"
        ) from None


def _layers(text: str) -> tuple[int, ...]:
    layers = _ints(text)
    if len(layers) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: an EAGLE-3 head reads 3 hidden states")
    return layers


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse flags; unknown flags or bad values exit with code 64."""
    return build_parser().parse_args(argv)


def check_args(args: argparse.Namespace) -> SpecParams | None:
    """Check flag combinations and fill in resolved values; return the spec params, if any."""
    _check_values(args)
    debugging = _resolve_debugging(args)
    args.random_seed = 0 if args.random_seed is None else args.random_seed
    if args.speculative_algorithm is None:
        _warn_ignored_spec_flags(args, debugging)
        args.debug_slow_phase = {}  # a plain server has no phase to slow: nothing is injected
        return None
    if args.speculative_draft_model_path is None:
        raise ConfigError(
            f"is required with --speculative-algorithm {args.speculative_algorithm}",
            field="--speculative-draft-model-path",
            fix="e.g. --speculative-draft-model-path perfgate/eagle3-llama-tiny",
        )
    params = resolve_spec_params(
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    )
    args.speculative_num_steps = params.num_steps
    args.speculative_eagle_topk = params.topk
    args.speculative_num_draft_tokens = params.num_draft_tokens
    _check_verify_widths(args.debug_time_verify_widths, params, args.tp_size)
    if args.max_running_requests is None:
        logger.info(
            "Max running requests is reset to %d for speculative decoding",
            SPEC_MAX_RUNNING_REQUESTS,
        )
        args.max_running_requests = SPEC_MAX_RUNNING_REQUESTS
    return params


def _check_verify_widths(widths: Sequence[int], params: SpecParams, tp_size: int) -> None:
    field = "--debug-time-verify-widths"
    if not widths:
        return
    if params.topk != 1:
        raise ConfigError(
            f"times a chain's verify, not a tree's (--speculative-eagle-topk {params.topk})",
            field=field,
            fix="use --speculative-eagle-topk 1, or leave the flag out",
        )
    if tp_size != 1:
        raise ConfigError(
            f"times one rank's verify; --tp-size {tp_size} runs it on every rank together",
            field=field,
            fix="leave the flag out of a tensor-parallel server",
        )
    wrong = [w for w in widths if not 1 <= w <= params.num_draft_tokens]
    if wrong:
        raise ConfigError(
            f"{','.join(map(str, wrong))}: a chain of {params.num_steps} steps verifies 1 to "
            f"{params.num_draft_tokens} tokens a sequence",
            field=field,
            fix=f"widths from 1 to {params.num_draft_tokens}",
        )


def _check_values(args: argparse.Namespace) -> None:
    if args.tp_size < 1:
        raise ConfigError(f"{args.tp_size}: must be >= 1", field="--tp-size")
    if not 0 < args.port < 65536:
        raise ConfigError(f"{args.port} is not a TCP port", field="--port", fix="use 1..65535")
    for flag in ("num_threads", "max_running_requests"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError("must be >= 1", field="--" + flag.replace("_", "-"))
    fault = args.debug_rank_exit
    if fault is not None and fault.rank >= args.tp_size:
        raise ConfigError(
            f"names rank {fault.rank}, but --tp-size {args.tp_size} has ranks 0 to "
            f"{args.tp_size - 1}",
            field="--debug-rank-exit",
            fix="name a rank from 1 to --tp-size - 1 (rank 0 is the server itself)",
        )
    rate = args.debug_simulate_accept_rate
    if rate is not None and not 0.0 <= rate <= 1.0:
        raise ConfigError(f"{rate} is not a probability", field="--debug-simulate-accept-rate")


def _resolve_debugging(args: argparse.Namespace) -> list[str]:
    """Fill in the verify delay and the slowed phases, from their flags or else their
    variables; return the flags given on the command line (a variable reaches every server
    perfgate launches, the plain twin's too; a flag was meant for this one)."""
    flags = []
    if args.debug_verify_delay_ms is None:
        args.debug_verify_delay_ms = _delay_from_env()
    elif args.debug_verify_delay_ms:
        flags.append("--debug-verify-delay-ms")
    if args.debug_verify_delay_ms < 0:
        raise ConfigError("must be >= 0", field="--debug-verify-delay-ms")
    if args.debug_slow_phase is None:
        raw, where = os.environ.get(slowdown.VARIABLE), slowdown.VARIABLE
    else:
        raw, where = args.debug_slow_phase, slowdown.FLAG
    args.debug_slow_phase = slowdown.parse_slow_phases(raw, field=where)
    if where == slowdown.FLAG and args.debug_slow_phase:
        flags.append(slowdown.FLAG)
    return flags


def _delay_from_env() -> float:
    raw = os.environ.get(DELAY_VARIABLE, "") or "0"
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(
            f"{raw!r} is not a number", field=DELAY_VARIABLE, fix="set milliseconds, e.g. 5"
        ) from None


def _warn_ignored_spec_flags(args: argparse.Namespace, debugging: list[str]) -> None:
    spec_flags = {
        "--speculative-draft-model-path": args.speculative_draft_model_path,
        "--speculative-num-steps": args.speculative_num_steps,
        "--speculative-eagle-topk": args.speculative_eagle_topk,
        "--speculative-num-draft-tokens": args.speculative_num_draft_tokens,
        "--debug-simulate-accept-rate": args.debug_simulate_accept_rate,
        "--debug-eagle3-feature-layers": args.debug_eagle3_feature_layers,
        "--debug-time-verify-widths": args.debug_time_verify_widths or None,
    }
    given = [flag for flag, value in spec_flags.items() if value is not None] + debugging
    if given:
        logger.warning(
            "Ignoring %s: no --speculative-algorithm, so this is a plain server",
            ", ".join(given),
        )


def resolve_device(name: str) -> torch.device:
    """Return the device for --device; auto picks cuda when available."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "cuda: no CUDA device is visible to torch", field="--device", fix="use --device cpu"
        )
    return torch.device(name)


def resolve_attention_backend(name: str | None, device: torch.device) -> str:
    """Return the backend --attention-backend names, or its default on device; raise
    ConfigError for triton where it cannot run."""
    if name is None:
        fits = device.type == "cuda" and triton_attention.available()
        return "triton" if fits else "torch_native"
    if name == "triton" and device.type != "cuda":
        raise ConfigError(
            f"triton runs on CUDA only, and the device is {device.type}",
            field="--attention-backend",
            fix="use --attention-backend torch_native, or --device cuda",
        )
    if name == "triton" and not triton_attention.available():
        raise ConfigError(
            "triton: Triton is not installed here",
            field="--attention-backend",
            fix="pip install triton (PyTorch's CUDA builds bring it), or use torch_native",
        )
    return name


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """Return the dtype for --dtype; auto is bfloat16 on CUDA, float32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]
