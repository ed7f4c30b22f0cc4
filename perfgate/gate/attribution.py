"""Why did tok/s move? Per-phase deltas of the decode cycle, from the same runs. Pure.

Speculative throughput is tokens per cycle over time per cycle::

    output_tok_s ~ accept_length / cycle_ms

so a change in tok/s comes from the cycle taking longer (and then from which phase:
``draft``, ``verify``, ``draft_extend``, ``accept``, or ``other``, the cycle's time outside
the named phases) or from fewer tokens accepted per cycle. Attribution compares the mean ms
per cycle of each phase, and the accept length, of the current runs with the baseline's, and
says which share of the cycle's change each phase accounts for::

    output_tok_s -7.1%: cycle +2.4 ms (+10%); verify +2.1 ms/cycle (+9%) explains 88%;
    accept length unchanged (2.61)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate import metrics

# Below these, a change is reported as "unchanged" and no shares are computed: a share of a
# cycle change of a few microseconds is noise divided by noise.
STEADY_CYCLE = 0.005  # relative change of the cycle's mean ms
STEADY_ACCEPT = 0.01  # relative change of the accept length
EXPLAINING_SHARE = 0.25  # a phase is named when it accounts for this much of the change


@dataclass(frozen=True)
class CycleProfile:
    """Where one side's decode cycle goes: mean ms per cycle of each phase, and tokens.

    ``phase_ms`` holds the named phases and ``cycle`` for the speculative server;
    ``plain_cycle_ms`` the plain twin's decode step (one token), if probed.
    """

    phase_ms: Mapping[str, float]
    accept_length: float | None = None
    plain_cycle_ms: float | None = None


@dataclass(frozen=True)
class PhaseShift:
    """One phase's mean ms per cycle, baseline against current."""

    phase: str
    baseline_ms: float
    current_ms: float
    share: float | None  # of the cycle's change; None when the cycle did not move

    @property
    def delta_ms(self) -> float:
        return self.current_ms - self.baseline_ms

    @property
    def relative(self) -> float | None:
        return self.delta_ms / self.baseline_ms if self.baseline_ms > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "delta_ms": self.delta_ms, "relative": self.relative}


@dataclass(frozen=True)
class Attribution:
    """What moved a throughput metric, from the runs that were judged.

    ``cycle`` is the whole cycle; ``phases`` the named phases and ``other``, each with its
    share of the cycle's change (shares add up to 1 when the cycle moved). ``accept_length``
    is (baseline, current); ``tok_s_change`` the spec and plain tok/s changes behind a
    ``speedup`` change. ``summary`` says it in one line.
    """

    metric: str
    change: float
    cycle: PhaseShift
    phases: tuple[PhaseShift, ...]
    accept_length: tuple[float, float] | None
    tok_s_change: tuple[float, float] | None
    summary: str

    @property
    def head(self) -> str:
        """The summary's first words: the metric's change (and for ``speedup`` the spec and
        plain tok/s changes behind it)."""
        return _head(self.metric, self.change, self.tok_s_change)

    @property
    def cause(self) -> str:
        """The summary after its head: the cycle, the phases that explain it, the accept
        length. Two metrics judged on the same runs share it."""
        return self.summary.removeprefix(self.head).strip()

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "change": self.change,
            "cycle": self.cycle.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "accept_length": list(self.accept_length) if self.accept_length else None,
            "tok_s_change": list(self.tok_s_change) if self.tok_s_change else None,
            "summary": self.summary,
        }


def cycle_profile(
    phase_runs: Sequence[Mapping[str, Sequence[float]]],
    accept_runs: Sequence[Sequence[float]] = (),
    plain_cycle_runs: Sequence[Sequence[float]] = (),
) -> CycleProfile | None:
    """Average per-run phase means into one profile; None without cycle timings.

    ``phase_runs`` holds, per run, each phase's mean ms per cycle for every repeat. Each run
    counts once, whatever its number of repeats, as in the gate's estimate.
    """
    per_run: dict[str, list[float]] = {}
    for run in phase_runs:
        for phase, values in run.items():
            if values:
                per_run.setdefault(phase, []).append(sum(values) / len(values))
    if metrics.CYCLE not in per_run:
        return None
    return CycleProfile(
        phase_ms={phase: sum(v) / len(v) for phase, v in per_run.items()},
        accept_length=_mean_of_means(accept_runs),
        plain_cycle_ms=_mean_of_means(plain_cycle_runs),
    )


def _mean_of_means(runs: Sequence[Sequence[float]]) -> float | None:
    means = [sum(r) / len(r) for r in runs if r]
    return sum(means) / len(means) if means else None


def attribute(
    metric: str,
    change: float,
    baseline: CycleProfile,
    current: CycleProfile,
    tok_s_change: tuple[float, float] | None = None,
) -> Attribution:
    """Explain ``metric``'s relative ``change`` by the cycle's phases and the accept length.

    Parameters
    ----------
    metric, change
        The throughput metric (``output_tok_s`` or ``speedup``) and its estimated relative
        change (``-0.071`` for -7.1%).
    baseline, current
        Where the cycle went in the baseline's runs and in the current runs.
    tok_s_change
        For ``speedup``: the relative change of the spec and of the plain tok/s.

    Returns
    -------
    Attribution
        Per-phase deltas (ms per cycle, relative, share of the cycle's change) and a summary.
    """
    cycle = _shift(metrics.CYCLE, baseline, current, None)
    moved = cycle.relative is not None and abs(cycle.relative) >= STEADY_CYCLE
    total = cycle.delta_ms if moved else None
    phases = tuple(
        _shift(phase, baseline, current, total)
        for phase in (*metrics.NAMED_PHASES, metrics.OTHER)
        if phase == metrics.OTHER or phase in baseline.phase_ms or phase in current.phase_ms
    )
    accept = None
    if baseline.accept_length and current.accept_length:
        accept = (baseline.accept_length, current.accept_length)
    text = _summary(metric, change, cycle, phases, accept, tok_s_change, moved)
    return Attribution(metric, change, cycle, phases, accept, tok_s_change, text)


def _phase_ms(profile: CycleProfile, phase: str) -> float:
    if phase != metrics.OTHER:
        return profile.phase_ms.get(phase, 0.0)
    named = sum(profile.phase_ms.get(p, 0.0) for p in metrics.NAMED_PHASES)
    return max(profile.phase_ms.get(metrics.CYCLE, 0.0) - named, 0.0)


def _shift(
    phase: str, baseline: CycleProfile, current: CycleProfile, total: float | None
) -> PhaseShift:
    before, after = _phase_ms(baseline, phase), _phase_ms(current, phase)
    share = (after - before) / total if total else None
    return PhaseShift(phase, before, after, share)


def _summary(
    metric: str,
    change: float,
    cycle: PhaseShift,
    phases: Sequence[PhaseShift],
    accept: tuple[float, float] | None,
    tok_s_change: tuple[float, float] | None,
    moved: bool,
) -> str:
    parts = [_head(metric, change, tok_s_change)]
    if moved:
        parts.append(f"cycle {_ms(cycle)};")
        for shift in _explaining(phases):
            parts.append(f"{shift.phase} {_ms(shift)} explains {shift.share:.0%};")
    else:
        parts.append(f"cycle unchanged ({cycle.current_ms:.3g} ms);")
    if accept is None:
        parts.append("accept length not measured")
    elif abs(accept[1] / accept[0] - 1.0) < STEADY_ACCEPT:
        parts.append(f"accept length unchanged ({accept[1]:.3g})")
    else:
        parts.append(
            f"accept length {accept[1] / accept[0] - 1.0:+.1%} ({accept[0]:.3g} -> {accept[1]:.3g})"
        )
    return " ".join(parts)


def _head(metric: str, change: float, tok_s_change: tuple[float, float] | None) -> str:
    head = f"{metric} {change:+.1%}:"
    if tok_s_change is None:
        return head
    return f"{head} spec tok/s {tok_s_change[0]:+.1%}, plain tok/s {tok_s_change[1]:+.1%};"


def _ms(shift: PhaseShift) -> str:
    relative = f" ({shift.relative:+.0%})" if shift.relative is not None else ""
    return f"{shift.delta_ms:+.3g} ms/cycle{relative}"


def _explaining(phases: Sequence[PhaseShift]) -> list[PhaseShift]:
    """The phases that account for most of the cycle's change, largest share first."""
    ranked = sorted(
        (p for p in phases if p.share is not None and p.share >= EXPLAINING_SHARE),
        key=lambda p: -(p.share or 0.0),
    )
    return ranked[:2]
