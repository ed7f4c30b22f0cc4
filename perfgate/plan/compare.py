"""A plan as the history keeps it, and its predictions against what was measured. Pure.

The profiled run's recorded config holds the whole prediction under ``plan`` (role
``profiled``), with the observation it was made from (``observation``: what the probe saw,
so that a later model can be judged on a recorded run: benchmarks/replan.py); each
confirmed point's holds its own predicted figures and their errors against what it
measured (role ``confirm``, with the profiled run's id). An error is
``predicted / measured - 1``: +5% means the plan promised 5% more than was measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from perfgate import metrics
from perfgate.plan.forecast import (
    FIGURES,
    Estimate,
    Observation,
    PredictedPoint,
    Prediction,
    Repeat,
)
from perfgate.results import Measurement, ModeResult
from perfgate.sweep.results import median_of

# The figures a confirmed point is compared on: the predicted ones a run records (a run
# records no verify share).
COMPARED = tuple(figure for figure in FIGURES if figure != "verify_share")
PHASE_FIGURES = {
    "cycle_ms": metrics.CYCLE,
    "draft_ms": metrics.DRAFT,
    "verify_ms": metrics.VERIFY,
    "draft_extend_ms": metrics.DRAFT_EXTEND,
    "accept_ms": metrics.ACCEPT,
}


def point_json(point: PredictedPoint) -> dict[str, Any]:
    """One step count's predicted figures: [value, low, high] each (null where not finite)."""
    return {"steps": point.steps, **{f: point[f].as_list() for f in FIGURES}}


def prediction_json(prediction: Prediction) -> dict[str, Any]:
    """The profiled run's ``plan`` entry."""
    return {
        "role": "profiled",
        "steps": prediction.steps_run,
        "best": prediction.best().steps,
        "seed": prediction.seed,
        "replicates": prediction.replicates,
        "predicted": [point_json(p) for p in prediction.points],
        "notes": list(prediction.notes),
    }


def observation_json(observation: Observation) -> dict[str, Any]:
    """The profiled run's observation as JSON (observation_of reads it back)."""
    return asdict(observation)


def observation_of(entry: Mapping[str, Any]) -> Observation:
    """An observation from its JSON (observation_json)."""
    repeats = tuple(
        Repeat(
            elapsed_s=float(r["elapsed_s"]),
            tokens=int(r["tokens"]),
            cycles=tuple({k: float(v) for k, v in c.items()} for c in r["cycles"]),
            depths=tuple(tuple(int(d) for d in row) for row in r["depths"]),
            every=int(r["every"]),
        )
        for r in entry["repeats"]
    )
    return Observation(
        steps=int(entry["steps"]),
        sequences=int(entry["sequences"]),
        repeats=repeats,
        budget=None if entry["budget"] is None else int(entry["budget"]),
        plain_tok_s=tuple(float(t) for t in entry["plain_tok_s"]),
        plain_step_ms=tuple(float(t) for t in entry["plain_step_ms"]),
        verify_ms_by_width=tuple((int(w), float(ms)) for w, ms in entry["verify_ms_by_width"]),
    )


def measured_figures(measurement: Measurement) -> dict[str, float]:
    """What a run measured, as the plan predicts it: median tok/s, speedup and accept length
    over the repeats; each phase's mean ms per cycle over all its timed cycles."""
    spec, plain = measurement.spec, measurement.plain
    tok_s, plain_tok_s = median_of(spec, "output_tok_s"), median_of(plain, "output_tok_s")
    figures = {
        "output_tok_s": tok_s,
        "speedup": tok_s / plain_tok_s if plain_tok_s else math.nan,
        "accept_length": median_of(spec, "accept_length"),
    }
    for figure, phase in PHASE_FIGURES.items():
        figures[figure] = mean_phase_ms(spec, phase)
    return figures


def mean_phase_ms(result: ModeResult, phase: str) -> float:
    """The phase's mean ms per cycle over every timed cycle of the repeats; NaN without it."""
    summaries = [s for s in result.phases if s.phase == phase and s.cycles]
    cycles = sum(s.cycles for s in summaries)
    return sum(s.mean_ms * s.cycles for s in summaries) / cycles if cycles else math.nan


def prediction_errors(
    predicted: Mapping[str, Estimate], measured: Mapping[str, float]
) -> dict[str, float | None]:
    """Per figure compared, predicted over measured less one; None where either is unknown."""
    errors: dict[str, float | None] = {}
    for figure in COMPARED:
        value, truth = predicted[figure].value, measured.get(figure, math.nan)
        fine = math.isfinite(value) and math.isfinite(truth) and truth != 0
        errors[figure] = value / truth - 1 if fine else None
    return errors


def confirm_json(
    point: PredictedPoint, measured: Mapping[str, float], profiled_run: int | None
) -> dict[str, Any]:
    """A confirmed point's ``plan`` entry: its prediction, and the errors against this run."""
    return {
        "role": "confirm",
        "profiled_run": profiled_run,
        "steps": point.steps,
        "predicted": point_json(point),
        "error": prediction_errors(point.figures, measured),
    }
