"""A load's timings as perfgate's serving metrics (milliseconds, tokens per second). Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfgate.serving.generator import LoadRun
from perfgate.spec.serving import SERVING_METRICS

__all__ = ["SERVING_METRICS", "percentile", "summarize_load"]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics, as
    numpy's default computes it (and so ``sglang.benchmark.serving``); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_load(run: LoadRun) -> dict[str, float]:
    """One value per serving metric: output tokens over the load's duration, and the
    median and 99th percentile of the requests' first-token times and of every inter-token
    latency."""
    ttft_ms = [t.ttft_s * 1e3 for t in run.timings]
    itl_ms = [gap * 1e3 for t in run.timings for gap in t.itl_s]
    tokens = sum(t.output_tokens for t in run.timings)
    return {
        "serving_output_tok_s": tokens / run.duration_s,
        "ttft_ms_p50": percentile(ttft_ms, 50),
        "ttft_ms_p99": percentile(ttft_ms, 99),
        "itl_ms_p50": percentile(itl_ms, 50),
        "itl_ms_p99": percentile(itl_ms, 99),
    }
