"""What a plan found: per environment point its profiled run and prediction, the confirmed
points, the runner time. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfgate.errors import ExitCode
from perfgate.plan import DEFAULT_CONFIRM, DEFAULT_STEPS
from perfgate.plan.forecast import PredictedPoint, Prediction
from perfgate.sweep.grid import EnvPoint, SweepSpec
from perfgate.sweep.results import PointResult, SweepResult


@dataclass(frozen=True)
class PlanSpec:
    """What a plan profiles and confirms."""

    name: str  # its runs' scenario in the history
    scenario: str
    steps: int = DEFAULT_STEPS
    env: dict[str, tuple[str, ...]] = field(default_factory=dict)
    repeats: int | None = None
    confirm: int = DEFAULT_CONFIRM
    seed: int = 0

    def sweep(self) -> SweepSpec:
        """The sweep that profiles it: chains at `steps`, under every environment point."""
        return SweepSpec(
            name=self.name,
            scenario=self.scenario,
            steps=(self.steps,),
            topk=(1,),
            env=self.env,
            repeats=self.repeats,
            early_stop=False,
        )


@dataclass(frozen=True)
class EnvPlan:
    """One environment point's profiled run and what it predicted (or why it could not)."""

    label: str
    env: EnvPoint
    profiled: PointResult
    prediction: Prediction | None = None
    refused: str | None = None
    refit: Prediction | None = None  # the prediction again, its costs refit on the confirmed


@dataclass(frozen=True)
class Confirmed:
    """A predicted step count measured: its prediction and the point it measured."""

    predicted: PredictedPoint  # the first prediction's, whichever chose it
    measured: PointResult
    label: str
    env: EnvPoint
    chosen_by: str = "the prediction"  # or "the refit" on the confirmations before it


@dataclass(frozen=True)
class PlanResult:
    spec: PlanSpec
    plans: tuple[EnvPlan, ...]
    confirmed: tuple[Confirmed, ...]
    sweep: SweepResult
    profile_s: float  # runner time of step 1: plain twins and profiled servers
    confirm_s: float  # of step 2

    def predicted_best(self) -> tuple[EnvPlan, PredictedPoint] | None:
        """The fastest predicted step count over every environment point."""
        ranked = ranked_points(self.plans)
        return ranked[0] if ranked else None

    def measured_best(self) -> PointResult | None:
        """The fastest measured point (profiled or confirmed) whose outputs passed."""
        return self.sweep.best()

    def exit_code(self) -> ExitCode:
        """64 if the model refused a run; else the sweep's (69, 1, 75 or 0)."""
        if any(p.refused for p in self.plans):
            return ExitCode.BAD_INPUT
        return self.sweep.exit_code()


def ranked_points(
    plans: tuple[EnvPlan, ...], latest: bool = False
) -> list[tuple[EnvPlan, PredictedPoint]]:
    """Every predicted step count of every environment point, fastest first: by the first
    prediction, or with `latest` by its refit where there is one."""
    found = [
        (plan, point)
        for plan in plans
        for prediction in [(plan.refit if latest else None) or plan.prediction]
        if prediction
        for point in prediction.points
    ]
    return sorted(found, key=lambda item: -_tok_s(item[1]))


def _tok_s(point: PredictedPoint) -> float:
    value = point["output_tok_s"].value
    return value if value == value else float("-inf")  # NaN last
