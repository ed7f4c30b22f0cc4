"""What measuring costs: tok/s with an instrument over tok/s without it, from paired launches.

Pure. Used by ``benchmarks/probe_overhead.py`` (the probe on against off, fresh server
launches alternating in one session).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.gate.stats import t_ppf


@dataclass(frozen=True)
class RatioEstimate:
    """The geometric mean of paired ratios (with / without), with its confidence interval."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float

    @property
    def cost(self) -> float:
        """The share of tok/s the instrument takes: ``1 - ratio`` (negative: no cost seen)."""
        return 1.0 - self.ratio

    def goal(self, max_cost: float) -> str:
        """``met`` when the whole interval of the cost is within `max_cost`; ``not shown``
        when the estimate is but the interval reaches past it; ``missed`` otherwise."""
        if 1.0 - self.low <= max_cost:
            return "met"
        return "not shown" if self.cost <= max_cost else "missed"


def paired_ratio(
    with_: Sequence[float], without: Sequence[float], confidence: float = 0.95
) -> RatioEstimate:
    """Estimate ``with / without`` from pairs of measurements taken side by side.

    Each pair's log ratio is one observation, so drift over the session (a warming GPU, a
    neighbour's load) cancels within a pair; the interval is Student's t on those log ratios,
    two-sided at `confidence`.

    >>> e = paired_ratio([99.0, 98.0, 99.5, 98.5], [100.0, 99.0, 100.0, 99.5])
    >>> round(e.ratio, 4), e.low < e.ratio < e.high
    (0.9912, True)
    """
    if len(with_) != len(without) or len(with_) < 2:
        raise ValueError("paired_ratio needs at least two pairs, as many with as without")
    logs = [math.log(a / b) for a, b in zip(with_, without, strict=True)]
    mean = statistics.fmean(logs)
    half = t_ppf(0.5 + confidence / 2, len(logs) - 1) * statistics.stdev(logs) / len(logs) ** 0.5
    return RatioEstimate(
        ratio=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        pairs=len(logs),
        confidence=confidence,
    )
