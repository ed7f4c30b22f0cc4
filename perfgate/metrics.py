"""The names every part of perfgate uses for phases and metrics (DB, baselines, report)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Phases of one decode cycle; `cycle` is the whole cycle, `prefill` stands apart.
DRAFT = "draft"
VERIFY = "verify"
DRAFT_EXTEND = "draft_extend"
ACCEPT = "accept"
CYCLE = "cycle"
PREFILL = "prefill"
OTHER = "other"  # cycle minus the named phases; derived, never probed

NAMED_PHASES: tuple[str, ...] = (DRAFT, VERIFY, DRAFT_EXTEND, ACCEPT)
PROBED_PHASES: tuple[str, ...] = (*NAMED_PHASES, CYCLE, PREFILL)


class Direction(enum.Enum):
    HIGHER_IS_BETTER = "higher"
    LOWER_IS_BETTER = "lower"


@dataclass(frozen=True)
class Metric:
    name: str
    direction: Direction
    unit: str
    description: str


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("output_tok_s", Direction.HIGHER_IS_BETTER, "tok/s", "generated tokens per second"),
        Metric(
            "accept_length",
            Direction.HIGHER_IS_BETTER,
            "tok/cycle",
            "completion tokens per verify pass, bonus token included",
        ),
        Metric("speedup", Direction.HIGHER_IS_BETTER, "x", "speculative over plain tok/s"),
        Metric(
            "decode_tok_s",
            Direction.HIGHER_IS_BETTER,
            "tok/s",
            "tokens per second of decode cycles, per sequence (accept length over cycle time)",
        ),
        Metric("verify_ms", Direction.LOWER_IS_BETTER, "ms", "verify phase per cycle (median)"),
        Metric(
            "verify_steps",
            Direction.LOWER_IS_BETTER,
            "steps",
            "verify phase per cycle in the plain twin's decode steps (same run)",
        ),
        Metric("draft_ms", Direction.LOWER_IS_BETTER, "ms", "draft phase per cycle (median)"),
        Metric(
            "draft_extend_ms",
            Direction.LOWER_IS_BETTER,
            "ms",
            "draft-extend phase per cycle (median)",
        ),
        Metric("cycle_ms", Direction.LOWER_IS_BETTER, "ms", "whole decode cycle (median)"),
        Metric("ttft_ms", Direction.LOWER_IS_BETTER, "ms", "time to first token"),
        # Serving under load ([scenarios.NAME.serving]): one value per load.
        Metric(
            "serving_output_tok_s",
            Direction.HIGHER_IS_BETTER,
            "tok/s",
            "output tokens per second under the serving load",
        ),
        Metric(
            "ttft_ms_p50", Direction.LOWER_IS_BETTER, "ms", "time to first token under load, median"
        ),
        Metric(
            "ttft_ms_p99", Direction.LOWER_IS_BETTER, "ms", "time to first token under load, p99"
        ),
        Metric(
            "itl_ms_p50", Direction.LOWER_IS_BETTER, "ms", "inter-token latency under load, median"
        ),
        Metric(
            "itl_ms_p99", Direction.LOWER_IS_BETTER, "ms", "inter-token latency under load, p99"
        ),
        # The same, as SGLang's sglang.benchmark.serving measured them (the cross-check).
        Metric(
            "sglang_output_tok_s",
            Direction.HIGHER_IS_BETTER,
            "tok/s",
            "output tokens per second under load, by sglang.benchmark.serving",
        ),
        Metric(
            "sglang_ttft_ms_p50",
            Direction.LOWER_IS_BETTER,
            "ms",
            "median TTFT, by sglang.benchmark.serving",
        ),
        Metric(
            "sglang_ttft_ms_p99",
            Direction.LOWER_IS_BETTER,
            "ms",
            "p99 TTFT, by sglang.benchmark.serving",
        ),
        Metric(
            "sglang_itl_ms_p50",
            Direction.LOWER_IS_BETTER,
            "ms",
            "median ITL, by sglang.benchmark.serving",
        ),
        Metric(
            "sglang_itl_ms_p99",
            Direction.LOWER_IS_BETTER,
            "ms",
            "p99 ITL, by sglang.benchmark.serving",
        ),
    )
}

# Metrics gated unless a scenario says otherwise.
DEFAULT_GATED: tuple[str, ...] = ("output_tok_s", "verify_ms", "accept_length", "speedup")

# The per-cycle metric each phase feeds.
PHASE_METRIC: dict[str, str] = {
    DRAFT: "draft_ms",
    VERIFY: "verify_ms",
    DRAFT_EXTEND: "draft_extend_ms",
    CYCLE: "cycle_ms",
}

# The metrics whose changes are explained phase by phase (perfgate.gate.attribution).
EXPLAINED = ("output_tok_s", "speedup", "decode_tok_s")

# The speculative server's metrics derived from its others (perfgate.results.Measurement):
# `speedup` from both servers' tok/s; `decode_tok_s` from its accept length and cycle time,
# the throughput of its decode cycles alone, as the probe times them (on a GPU, with CUDA
# events), without the prefill, the HTTP round trip and the time between cycles;
# `verify_steps`, its verify over the plain twin's decode step (the target's one-token
# forward on the same GPUs, in the same run), in which a machine's own speed divides out:
# between two H100s of one kind verify_ms differed by 1.2% and verify_steps by 0.2%
# (benchmarks/results/h200-gate-proof.md, 2026-12-06, fourth lease). It does not see a
# change that slows the target's forward everywhere alike; verify_ms and tok/s do.
DERIVED = ("speedup", "decode_tok_s", "verify_steps")
