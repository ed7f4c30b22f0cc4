"""Plan a chain: profile it once at many steps, predict every shorter one, confirm the best.

A policy over the sweep's runner (perfgate.sweep.run), so a plan's servers are measured and
recorded exactly as a sweep's points are, under the plan's name:

1. The grid is the profiled step count alone, under every environment point: the plain twin
   once per environment point, then the speculative server at ``steps``, profiled
   (perfgate.plan.launch). Before its run is recorded, its observation is predicted
   (perfgate.plan.forecast) and the prediction goes into the run's config (``plan``, role
   ``profiled``); a run the model refuses is recorded all the same, with the refusal.
2. The `confirm` fastest predicted step counts, over every environment point, are measured
   (the sweep's `extend`, under the same plain twin); each is recorded with its prediction and
   the errors against what it measured (role ``confirm``). A step count the profiled run
   drafted is measured already: it needs no launch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.config import Scenario
from perfgate.errors import ConfigError, PerfgateError
from perfgate.measure import measure_mode
from perfgate.pipeline import MeasureMode
from perfgate.plan.compare import (
    confirm_json,
    measured_figures,
    observation_json,
    prediction_json,
)
from perfgate.plan.forecast import Forecast, PredictedPoint, Prediction
from perfgate.plan.launch import ProfilingLaunch, batch_sequences
from perfgate.plan.observe import measured_costs, observe
from perfgate.plan.results import Confirmed, EnvPlan, PlanResult, PlanSpec, ranked_points
from perfgate.progress import SILENT, Reporter
from perfgate.results import Measurement, RunContext
from perfgate.sweep.grid import Point
from perfgate.sweep.results import PointResult
from perfgate.sweep.run import SweepRunner, sweep_label


@dataclass
class PlanRunner:
    """One plan, measured and recorded through the sweep's runner (see the module doc)."""

    spec: PlanSpec
    base: Scenario
    profile: str
    history_url: str
    workdir: Path
    context: RunContext
    config_file: Path | None = None
    budget_s: float | None = None
    measure: MeasureMode = measure_mode
    progress: Reporter = SILENT
    refresh_plain: bool = False  # measure the plain twin, whatever plain_max_age_h allows
    _predictions: dict[str, Prediction] = field(default_factory=dict)
    _forecasts: dict[str, Forecast] = field(default_factory=dict)
    _refusals: dict[str, str] = field(default_factory=dict)
    _faults: list[Exception] = field(default_factory=list)
    _profiled_runs: dict[str, int | None] = field(default_factory=dict)
    _launch: ProfilingLaunch | None = None

    def run(self) -> PlanResult:
        self._launch = ProfilingLaunch(self.spec.steps, measure=self.measure)
        sweep = SweepRunner(
            spec=self.spec.sweep(),
            base=self.base,
            profile=self.profile,
            history_url=self.history_url,
            workdir=self.workdir,
            context=self.context,
            config_file=self.config_file,
            early_stop=False,
            budget_s=self.budget_s,
            measure=self._launch,
            progress=self.progress,
            annotate=self._annotate,
            refresh_plain=self.refresh_plain,
        )
        clock = time.monotonic()
        first = sweep.run()
        if self._faults:  # the runs are recorded; the fault is the model's
            raise self._faults[0]
        profile_s, clock = time.monotonic() - clock, time.monotonic()
        plans = tuple(self._env_plan(point) for point in first.points)
        self._profiled_runs = {p.label: p.profiled.run_id for p in plans}
        for plan in plans:
            self._note(plan)
        result = first
        confirmed: tuple[Confirmed, ...] = ()
        while len(confirmed) < self.spec.confirm:
            chosen = self._next_to_confirm(plans, confirmed)
            if chosen is None:
                break
            point, label, predicted, by = chosen
            result = sweep.extend([point])
            measured = {(p.point.env, p.point.steps): p for p in result.points}
            found = measured[(point.env, point.steps)]
            confirmed = (*confirmed, Confirmed(predicted, found, label, point.env, by))
            plans = tuple(self._refit(plan, confirmed) for plan in plans)
        confirm_s = time.monotonic() - clock if confirmed else 0.0
        return PlanResult(self.spec, plans, confirmed, result, profile_s, confirm_s)

    def _refit(self, plan: EnvPlan, confirmed: tuple[Confirmed, ...]) -> EnvPlan:
        """The plan with its prediction refit on its confirmed step counts' costs, where any
        was measured with its phases timed."""
        forecast = self._forecasts.get(plan.label)
        found = [
            measured_costs(c.measured.point.steps, c.measured.measurement.spec)
            for c in confirmed
            if c.label == plan.label and c.measured.measurement is not None
        ]
        costs = tuple(m for m in found if m is not None)
        if forecast is None or not costs:
            return plan
        return replace(plan, refit=forecast.predict(costs))

    def _annotate(self, point: Point, measurement: Measurement) -> dict[str, Any]:
        """The ``plan`` entry of a point's recorded config; never raises (the run is kept)."""
        key = sweep_label(self.spec.sweep(), point.env)
        if point.steps == self.spec.steps:
            return {"plan": self._profiled_entry(key, measurement)}
        prediction = self._predictions[key]
        predicted = prediction.at(point.steps)
        entry = confirm_json(predicted, measured_figures(measurement), self._profiled_runs[key])
        return {"plan": entry}

    def _profiled_entry(self, key: str, measurement: Measurement) -> dict[str, Any]:
        assert self._launch is not None
        profiled = self._launch.profiled.get(Path(measurement.spec.log_path).parent)
        try:
            if profiled is None:
                raise ConfigError("the profiled server left no probe records")
            observation = observe(
                profiled.records,
                steps=self.spec.steps,
                sequences=batch_sequences(self.base),
                repeat_windows=profiled.repeat_windows,
                tok_s=measurement.spec.samples["output_tok_s"],
                tokens=sum(len(o) for o in measurement.spec.outputs),
                budget=self.base.max_new_tokens,
                plain=measurement.plain,
                verify_ms_by_width=profiled.verify_ms_by_width,
            )
            forecast = Forecast.of(observation, seed=self.spec.seed)
            prediction = forecast.predict()
            self._forecasts[key] = forecast
        except PerfgateError as error:
            self._refusals[key] = str(error)
            return {"role": "profiled", "steps": self.spec.steps, "refused": str(error)}
        except Exception as error:  # a fault of the model's: keep the run, raise after
            self._faults.append(error)
            return {"role": "profiled", "steps": self.spec.steps, "failed": repr(error)}
        self._predictions[key] = prediction
        return {**prediction_json(prediction), "observation": observation_json(observation)}

    def _env_plan(self, point: PointResult) -> EnvPlan:
        """A profiled point's plan; neither prediction nor refusal where its server failed
        (the sweep's failures say why)."""
        key = point.label
        prediction, refused = self._predictions.get(key), self._refusals.get(key)
        return EnvPlan(key, point.point.env, point, prediction, refused)

    def _note(self, plan: EnvPlan) -> None:
        if plan.refused:
            self.progress.note(f"plan ({plan.label}): refused: {plan.refused}")
        elif plan.prediction is not None:
            best = plan.prediction.best()
            tok_s = best["output_tok_s"]
            self.progress.note(
                f"plan ({plan.label}): predicted best steps={best.steps}: {tok_s.value:.1f} "
                f"tok/s ({tok_s.low:.1f} to {tok_s.high:.1f})"
            )

    def _next_to_confirm(
        self, plans: tuple[EnvPlan, ...], confirmed: tuple[Confirmed, ...]
    ) -> tuple[Point, str, PredictedPoint, str] | None:
        """The fastest step count not measured yet, by each environment point's latest
        prediction (its refit once a confirmation measured costs); with its first prediction
        (what its errors are of) and what chose it. None where every step count is measured."""
        measured = {(c.label, c.predicted.steps) for c in confirmed}
        measured |= {(plan.label, self.spec.steps) for plan in plans}
        for plan, predicted in ranked_points(plans, latest=True):
            if (plan.label, predicted.steps) not in measured:
                first = self._predictions[plan.label].at(predicted.steps)
                by = "the refit" if plan.refit is not None else "the prediction"
                point = Point(plan.env, predicted.steps, 1, predicted.steps + 1)
                return point, plan.label, first, by
        return None
