"""What a sweep found: each point's figures, the best configuration, the exit code. Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from perfgate import metrics
from perfgate.errors import ExitCode
from perfgate.results import Measurement, ModeResult
from perfgate.sweep.grid import Point, SweepSpec


def median_of(result: ModeResult, metric: str) -> float:
    """The median over repeats of one of a server's metrics; NaN when it has none."""
    values = [v for v in result.samples.get(metric, ()) if math.isfinite(v)]
    return statistics.median(values) if values else math.nan


def median_tok_s(result: ModeResult) -> float:
    return median_of(result, "output_tok_s")


def phase_share(result: ModeResult, phase: str) -> float:
    """The phase's share of all cycle time over the repeats (time totals); NaN without it."""
    totals: dict[str, float] = {}
    for summary in result.phases:
        totals[summary.phase] = totals.get(summary.phase, 0.0) + summary.mean_ms * summary.cycles
    cycle = totals.get(metrics.CYCLE, 0.0)
    return totals[phase] / cycle if phase in totals and cycle else math.nan


@dataclass(frozen=True)
class PointResult:
    """One point of the grid: measured and recorded, or skipped (and why)."""

    point: Point
    label: str  # the sweep and environment point, as recorded in the run's config
    run_id: int | None = None
    measurement: Measurement | None = None
    skipped: str | None = None
    clearly_worse: bool = False  # than the best point of its branch before it

    @property
    def measured(self) -> bool:
        return self.measurement is not None

    @property
    def equivalent(self) -> bool:
        return self.measurement is not None and self.measurement.equivalence.ok

    @property
    def outputs_pass(self) -> bool:
        """Equivalent, or the scenario only reports its equivalence (`equivalence = "report"`)."""
        return self.measurement is not None and self.measurement.outputs_pass

    def figures(self) -> dict[str, float]:
        """tok/s, speedup, accept length, verify and cycle ms, verify share (medians)."""
        if self.measurement is None:
            return {}
        spec, plain = self.measurement.spec, self.measurement.plain
        tok_s, plain_tok_s = median_tok_s(spec), median_tok_s(plain)
        return {
            "output_tok_s": tok_s,
            "plain_tok_s": plain_tok_s,
            "speedup": tok_s / plain_tok_s if plain_tok_s else math.nan,
            "accept_length": median_of(spec, "accept_length"),
            "verify_ms": median_of(spec, "verify_ms"),
            "draft_ms": median_of(spec, "draft_ms"),
            "cycle_ms": median_of(spec, "cycle_ms"),
            "verify_share": phase_share(spec, metrics.VERIFY),
        }

    def describe(self) -> str:
        """One line for the progress log."""
        if self.measurement is None:
            return f"{self.point.label()}: skipped ({self.skipped})"
        f = self.figures()
        text = (
            f"{self.point.label()}: {f['output_tok_s']:.1f} tok/s ({f['speedup']:.2f}x plain), "
            f"accept length {f['accept_length']:.2f}, verify {f['verify_ms']:.3f} ms "
            f"({f['verify_share']:.0%} of the cycle), "
            + ("equivalent" if self.equivalent else "NOT equivalent")
            + f", run #{self.run_id}"
        )
        return text + ("; clearly worse than the branch's best" if self.clearly_worse else "")


@dataclass(frozen=True)
class SweepResult:
    """A whole sweep, in the order it was measured."""

    spec: SweepSpec
    scenario: str  # the scenario the sweep varies
    points: tuple[PointResult, ...]
    plain: Mapping[str, float] = field(default_factory=dict)  # label -> plain tok/s
    # label -> the run whose plain twin was reused (plain_max_age_h), for those not measured
    plain_reused: Mapping[str, int] = field(default_factory=dict)
    plain_s: Mapping[str, float] = field(default_factory=dict)  # label -> its runner seconds
    stops: tuple[str, ...] = ()  # what the early-stop rule did (or would have done)
    failures: tuple[str, ...] = ()

    def best(self) -> PointResult | None:
        """The fastest point whose outputs were equivalent to the plain twin's."""
        return _fastest([p for p in self.points if p.outputs_pass])

    def none_beats_plain(self) -> bool:
        """True when every equivalent point was no faster than its plain twin (speedup <= 1):
        here speculative decoding costs more than it saves. False when one was faster, when a
        speedup is unknown (no plain tok/s), and when no point was equivalent."""
        speedups = [p.figures()["speedup"] for p in self.points if p.outputs_pass]
        return bool(speedups) and all(math.isfinite(s) and s <= 1 for s in speedups)

    def fastest(self) -> PointResult | None:
        """The fastest measured point, equivalent or not."""
        return _fastest([p for p in self.points if p.measured])

    def exit_code(self) -> ExitCode:
        """69 if a server failed, else 75 if no point was measured (a budget spent on nothing),
        else 1 if a point's outputs were not equivalent, else 0."""
        if self.failures:
            return ExitCode.INFRASTRUCTURE
        if not any(p.measured for p in self.points):
            return ExitCode.INCONCLUSIVE
        if any(p.measured and not p.outputs_pass for p in self.points):
            return ExitCode.REGRESSION
        return ExitCode.PASS


def _fastest(points: Sequence[PointResult]) -> PointResult | None:
    scored = [(p.figures()["output_tok_s"], p) for p in points]
    scored = [(tok_s, p) for tok_s, p in scored if math.isfinite(tok_s)]
    return max(scored, key=lambda item: item[0])[1] if scored else None
