"""A plan as a markdown table (printed as is) and as JSON. Pure."""

from __future__ import annotations

import math
from typing import Any

from perfgate.plan.compare import measured_figures, point_json, prediction_errors
from perfgate.plan.forecast import Estimate, PredictedPoint
from perfgate.plan.results import Confirmed, EnvPlan, PlanResult
from perfgate.sweep.render import best_line
from perfgate.sweep.results import PointResult

COLUMNS = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("accept_length", "accept length", "{:.2f}"),
    ("cycle_ms", "cycle ms", "{:.3f}"),
    ("draft_ms", "draft ms", "{:.3f}"),
    ("verify_ms", "verify ms", "{:.3f}"),
    ("draft_extend_ms", "draft_extend ms", "{:.3f}"),
    ("accept_ms", "accept ms", "{:.3f}"),
)


def render_markdown(result: PlanResult) -> str:
    """Per environment point the predicted table beside what was measured; the predicted and
    the measured best; the confirmations with their errors; the runner time."""
    spec = result.spec
    lines = [f"# Plan {spec.name} of {spec.scenario}", ""]
    lines.append(
        f"One speculative run at steps={spec.steps} (chains, topk 1) per environment point; "
        f"every step count up to it predicted, 95% intervals from a bootstrap over its "
        f"cycles and repeats (seed {spec.seed}), each width's draft extend, and its verify "
        "where the run did not time it at a second width, anywhere between their line and the "
        "run's own cost."
    )
    for plan in result.plans:
        lines += ["", *_env_section(result, plan)]
    lines += ["", _predicted_best_line(result)]
    lines += [_confirmed_line(c) for c in result.confirmed]
    lines.append(best_line(result.sweep).replace("Best:", "Best measured:", 1))
    lines.append(_cost_line(result))
    lines += [f"Failed: {failure}" for failure in result.sweep.failures]
    return "\n".join(lines) + "\n"


def _env_section(result: PlanResult, plan: EnvPlan) -> list[str]:
    plain = result.sweep.plain.get(plan.label)
    reused = result.sweep.plain_reused.get(plan.label)
    head = f"## {plan.label}" + (f": plain twin {plain:.1f} tok/s" if plain else "")
    head += f" (reused from run {reused}, plain_max_age_h)" if reused is not None else ""
    if plan.prediction is None:
        why = plan.refused or f"the profiled run failed: {plan.profiled.skipped}"
        return [head, "", f"Refused: {why}." if plan.refused else f"Not predicted: {why}."]
    measured = _measured_points(result, plan)
    titles = [title for _, title, _ in COLUMNS]
    lines = [
        head,
        "",
        "| steps | " + " | ".join(titles) + " | measured tok/s | error | run |",
        "|" + " --- |" * (len(titles) + 4),
    ]
    best = plan.prediction.best().steps
    for point in plan.prediction.points:
        steps = f"**{point.steps}**" if point.steps == best else str(point.steps)
        cells = [steps, *(_cell(point[f], shape) for f, _, shape in COLUMNS)]
        cells += _measured_cells(point, measured.get(point.steps), point.steps == result.spec.steps)
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"Note: {note}." for note in plan.prediction.notes]
    if plan.refit is not None:
        lines += ["", *_refit_lines(plan, measured, result.spec.scenario)]
    return lines


REFIT_COLUMNS = tuple(c for c in COLUMNS if c[0] in ("output_tok_s", "speedup", "cycle_ms"))


def _refit_lines(plan: EnvPlan, measured: dict[int, PointResult], scenario: str) -> list[str]:
    """The prediction again on the confirmed step counts' costs, and whether it points past
    what was measured."""
    assert plan.refit is not None
    seen = ", ".join(str(k) for k in sorted(measured))
    titles = [title for _, title, _ in REFIT_COLUMNS]
    lines = [
        f"Refit: each phase's cost on its line through the step counts measured ({seen}); "
        "acceptance as predicted.",
        "",
        "| steps | " + " | ".join(titles) + " | measured tok/s | error |",
        "|" + " --- |" * (len(titles) + 3),
    ]
    for point in plan.refit.points:
        cells = [str(point.steps), *(_cell(point[f], shape) for f, _, shape in REFIT_COLUMNS)]
        cells += _measured_cells(point, measured.get(point.steps), False)[:2]
        lines.append("| " + " | ".join(cells) + " |")
    best = plan.refit.best()
    rates = [
        (measured_figures(p.measurement)["output_tok_s"], p.point.steps)
        for p in measured.values()
        if p.measurement is not None
    ]
    if rates and best.steps not in measured:
        tok_s, steps = max(rates)
        if best["output_tok_s"].value > tok_s:
            lines.append(
                f"Note: the refit puts steps={best.steps} ahead "
                f"({best['output_tok_s'].value:.1f} tok/s) of the fastest measured "
                f"(steps={steps}, {tok_s:.1f}): measure it "
                f"(`perfgate sweep --scenario {scenario} --steps {best.steps}`)."
            )
    return lines


def _cell(estimate: Estimate, shape: str) -> str:
    if not math.isfinite(estimate.value):
        return ""
    if not (math.isfinite(estimate.low) and math.isfinite(estimate.high)):
        return shape.format(estimate.value)
    value, low, high = (shape.format(v) for v in (estimate.value, estimate.low, estimate.high))
    return f"{value} ({low} to {high})"


def _measured_points(result: PlanResult, plan: EnvPlan) -> dict[int, PointResult]:
    found = {plan.profiled.point.steps: plan.profiled}
    for confirmed in result.confirmed:
        if confirmed.label == plan.label:
            found[confirmed.measured.point.steps] = confirmed.measured
    return {steps: point for steps, point in found.items() if point.measured}


def _measured_cells(
    point: PredictedPoint, measured: PointResult | None, profiled: bool
) -> list[str]:
    if measured is None or measured.measurement is None:
        return ["", "", ""]
    truth = measured_figures(measured.measurement)["output_tok_s"]
    error = prediction_errors(point.figures, measured_figures(measured.measurement))
    shown = "profiled" if profiled else _percent(error["output_tok_s"])
    return [f"{truth:.1f}", shown, f"#{measured.run_id}"]


def _percent(value: float | None) -> str:
    return f"{value:+.1%}" if value is not None else ""


def _predicted_best_line(result: PlanResult) -> str:
    found = result.predicted_best()
    if found is None:
        return "Predicted best: none: no run could be predicted from."
    plan, point = found
    where = f" ({plan.label})" if result.spec.env else ""
    tok_s, speedup = point["output_tok_s"], point["speedup"]
    text = (
        f"Predicted best{where}: steps={point.steps}: {tok_s.value:.1f} tok/s "
        f"({tok_s.low:.1f} to {tok_s.high:.1f})"
    )
    if math.isfinite(speedup.value):
        text += f", {speedup.value:.2f}x plain ({speedup.low:.2f} to {speedup.high:.2f})"
    if math.isfinite(speedup.high) and speedup.high <= 1:
        text += ": no step count is predicted to beat plain decoding"
    return text + "."


def _confirmed_line(confirmed: Confirmed) -> str:
    point, measured = confirmed.predicted, confirmed.measured
    head = f"Confirmed steps={point.steps} (chosen by {confirmed.chosen_by})"
    if measured.measurement is None:
        return f"{head}: not measured ({measured.skipped})."
    truth = measured_figures(measured.measurement)
    errors = prediction_errors(point.figures, truth)
    equivalent = "" if measured.outputs_pass else ", outputs NOT equivalent"
    return (
        f"{head}: measured {truth['output_tok_s']:.1f} tok/s against "
        f"{point['output_tok_s'].value:.1f} predicted ({_percent(errors['output_tok_s'])}), "
        "accept length "
        f"{truth['accept_length']:.2f} against {point['accept_length'].value:.2f} "
        f"({_percent(errors['accept_length'])}), cycle {truth['cycle_ms']:.3f} ms against "
        f"{point['cycle_ms'].value:.3f} ({_percent(errors['cycle_ms'])}){equivalent} "
        f"(run #{measured.run_id})."
    )


def _cost_line(result: PlanResult) -> str:
    total = result.profile_s + result.confirm_s
    plain = "plain twin reused" if result.sweep.plain_reused else "plain twin"
    return (
        f"Runner time: {result.profile_s:.0f} s to profile ({plain} and profiled server), "
        f"{result.confirm_s:.0f} s to confirm, {total:.0f} s in all."
    )


def plan_json(result: PlanResult) -> dict[str, Any]:
    """The plan as JSON-ready values (NaN as null)."""
    found = result.predicted_best()
    best = result.measured_best()
    return {
        "name": result.spec.name,
        "scenario": result.spec.scenario,
        "steps": result.spec.steps,
        "seed": result.spec.seed,
        "env": {k: list(v) for k, v in result.spec.env.items()},
        "plans": [_env_json(result, plan) for plan in result.plans],
        "predicted_best": (
            {"sweep": found[0].label, **point_json(found[1])} if found is not None else None
        ),
        "confirmed": [_confirmed_json(c) for c in result.confirmed],
        "measured_best": _point_json(best) if best is not None else None,
        "none_beats_plain": result.sweep.none_beats_plain(),
        "runner_s": {
            "profile": result.profile_s,
            "confirm": result.confirm_s,
            "total": result.profile_s + result.confirm_s,
        },
        "failures": list(result.sweep.failures),
        "exit_code": int(result.exit_code()),
    }


def _env_json(result: PlanResult, plan: EnvPlan) -> dict[str, Any]:
    return {
        "sweep": plan.label,
        "env": dict(plan.env),
        "plain_tok_s": _finite(result.sweep.plain.get(plan.label)),
        "plain_reused_from": result.sweep.plain_reused.get(plan.label),
        "profiled": _point_json(plan.profiled),
        "refused": plan.refused,
        "predicted": [point_json(p) for p in plan.prediction.points] if plan.prediction else [],
        "best": plan.prediction.best().steps if plan.prediction else None,
        "notes": list(plan.prediction.notes) if plan.prediction else [],
        "refit": [point_json(p) for p in plan.refit.points] if plan.refit else [],
        "refit_best": plan.refit.best().steps if plan.refit else None,
    }


def _confirmed_json(confirmed: Confirmed) -> dict[str, Any]:
    measured = confirmed.measured.measurement
    truth = measured_figures(measured) if measured is not None else {}
    return {
        "sweep": confirmed.label,
        "steps": confirmed.predicted.steps,
        "chosen_by": confirmed.chosen_by,
        "predicted": point_json(confirmed.predicted),
        "measured": {k: _finite(v) for k, v in truth.items()},
        "error": prediction_errors(confirmed.predicted.figures, truth) if truth else None,
        "run": confirmed.measured.run_id,
        "equivalent": confirmed.measured.equivalent if measured is not None else None,
        "skipped": confirmed.measured.skipped,
    }


def _point_json(point: PointResult) -> dict[str, Any]:
    truth = measured_figures(point.measurement) if point.measurement is not None else {}
    return {
        "steps": point.point.steps,
        "run": point.run_id,
        "skipped": point.skipped,
        "equivalent": point.equivalent if point.measured else None,
        **{k: _finite(v) for k, v in truth.items()},
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
