"""What a run produces, as frozen dataclasses: these travel between measure, store, gate, report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from perfgate.equivalence import EquivalenceReport
from perfgate.gate.verdict import Status, Verdict


@dataclass(frozen=True)
class PhaseSummary:
    """One phase over the cycles of one repeat of one server."""

    mode: str  # "spec" or "plain"
    phase: str
    repeat: int
    cycles: int
    median_ms: float
    mean_ms: float
    p90_ms: float


# The key prefix, in ModeResult.engine_metrics, of the probe's milliseconds of a phase over the
# engine's own device timer's ("probe_over_engine.verify").
PROBE_OVER_ENGINE = "probe_over_engine."


@dataclass(frozen=True)
class ModeResult:
    """Everything measured on one server (the speculative one, or its plain twin)."""

    mode: str
    command: str  # the shell line that launched it
    samples: Mapping[str, tuple[float, ...]]  # metric -> one value per repeat
    phases: tuple[PhaseSummary, ...]
    outputs: tuple[tuple[int, ...], ...]  # token ids per prompt
    server_info: Mapping[str, Any] = field(default_factory=dict)
    log_path: str = ""
    # The engine's own counters around the repeats (SGLang /metrics deltas, and how the probe
    # compares with its GPU timer), when the scenario enables them; recorded, not gated.
    engine_metrics: Mapping[str, float] = field(default_factory=dict)
    # The plain twin's fingerprint digest (perfgate.plain_reuse), and the recorded run its
    # figures were copied from when they were reused instead of measured.
    reuse_key: str | None = None
    reused_from: int | None = None
    # Per prompt, per output position: the top tokens as (logprob, token id), best first.
    # The plain twin's only, for the equivalence rule; not kept in the history.
    top_logprobs: tuple[tuple[tuple[tuple[float, int], ...], ...], ...] = ()

    def phase_ms(self) -> dict[str, tuple[float, ...]]:
        """Per phase, the mean ms per cycle of each repeat, in repeat order."""
        result: dict[str, list[float]] = {}
        for summary in sorted(self.phases, key=lambda s: s.repeat):
            result.setdefault(summary.phase, []).append(summary.mean_ms)
        return {phase: tuple(values) for phase, values in result.items()}


@dataclass(frozen=True)
class Measurement:
    """One scenario measured once: both servers, their comparison, and the environment."""

    scenario: str
    profile: str
    engine: str
    fingerprint: Mapping[str, str]
    plain: ModeResult
    spec: ModeResult
    equivalence: EquivalenceReport
    started_at: datetime
    finished_at: datetime
    config: Mapping[str, Any] = field(default_factory=dict)  # the scenario, as run

    def samples(self) -> dict[str, tuple[float, ...]]:
        """The gate's metrics: the speculative server's, plus those derived from them."""
        return {**self.spec.samples, **self.derived_samples()}

    def derived_samples(self) -> dict[str, tuple[float, ...]]:
        """Per repeat, the metrics derived from the measured ones (``metrics.DERIVED``):
        ``speedup`` over the plain twin's tok/s, ``decode_tok_s``, 1000 times the accept
        length over the cycle's median ms (tokens per second of decode cycles, per
        sequence), and ``verify_steps``, the verify's median ms over the plain twin's decode
        step's, repeat by repeat; each where its inputs were measured."""
        result = {}
        spec_tok_s = self.spec.samples.get("output_tok_s", ())
        plain_tok_s = self.plain.samples.get("output_tok_s", ())
        if spec_tok_s and plain_tok_s:
            result["speedup"] = tuple(
                s / p for s, p in zip(spec_tok_s, plain_tok_s, strict=True) if p > 0
            )
        accept = self.spec.samples.get("accept_length", ())
        cycle = self.spec.samples.get("cycle_ms", ())
        if accept and len(accept) == len(cycle):
            result["decode_tok_s"] = tuple(
                1000.0 * a / c for a, c in zip(accept, cycle, strict=True) if c > 0
            )
        verify = self.spec.samples.get("verify_ms", ())
        step = self.plain.samples.get("cycle_ms", ())
        if verify and len(verify) == len(step):
            result["verify_steps"] = tuple(
                v / s for v, s in zip(verify, step, strict=True) if s > 0
            )
        return result

    @property
    def equivalence_gated(self) -> bool:
        """Whether the outputs' equivalence decides the run (the scenario's `equivalence`)."""
        return bool(self.config.get("equivalence", "gate") == "gate")

    @property
    def outputs_pass(self) -> bool:
        """The outputs are equivalent, or their equivalence is reported only."""
        return self.equivalence.ok or not self.equivalence_gated

    def equivalence_line(self) -> str:
        """The equivalence summary, saying when it is reported and not gated."""
        if self.equivalence_gated:
            return self.equivalence.summary()
        return f'reported, not gated (equivalence = "report"): {self.equivalence.summary()}'

    def phase_ms(self) -> dict[str, dict[str, tuple[float, ...]]]:
        """Per server mode, per phase, the mean ms per cycle of each repeat."""
        return {mode.mode: mode.phase_ms() for mode in (self.spec, self.plain) if mode.phases}


@dataclass(frozen=True)
class RunContext:
    """Where a run came from: commit, branch, pull request, CI job."""

    commit: str | None = None
    branch: str | None = None
    pr: str | None = None
    ci_url: str | None = None
    dirty: bool = False


@dataclass(frozen=True)
class RunRecord:
    """A run as the history keeps it."""

    measurement: Measurement
    context: RunContext
    verdicts: tuple[Verdict, ...]
    status: Status
    id: int | None = None  # assigned by the store
    judged_against: str | None = None  # in words: a baseline file, earlier runs here, or none
