"""A sweep as a markdown table (printed as is) and as JSON. Pure."""

from __future__ import annotations

import math
from typing import Any

from perfgate.sweep.results import PointResult, SweepResult

COLUMNS = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("accept_length", "accept length", "{:.2f}"),
    ("verify_ms", "verify ms", "{:.3f}"),
    ("draft_ms", "draft ms", "{:.3f}"),
    ("cycle_ms", "cycle ms", "{:.3f}"),
    ("verify_share", "verify share", "{:.0%}"),
)


def _plain_line(result: SweepResult, label: str, tok_s: float) -> str:
    run = result.plain_reused.get(label)
    reused = f", reused from run {run} (plain_max_age_h)" if run is not None else ""
    return f"Plain twin ({label}): {tok_s:.1f} tok/s{reused}."


def render_markdown(result: SweepResult) -> str:
    """The sweep's table, its plain twins, the best configuration and the early stops."""
    with_env = bool(result.spec.env)
    head = ["steps", "topk", "draft tokens", *(["env"] if with_env else [])]
    head += [title for _, title, _ in COLUMNS] + ["equivalent", "run", "note"]
    lines = [
        f"# Sweep {result.spec.name} of {result.scenario}",
        "",
        *(_plain_line(result, label, tok_s) for label, tok_s in result.plain.items()),
        "",
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
    ]
    best = result.best()
    # The fastest equivalent point is no "best" when plain decoding is as fast.
    best_note = "fastest" if result.none_beats_plain() else "**best**"
    for point in result.points:
        note = best_note if point is best else None
        lines.append("| " + " | ".join(_row(point, with_env, note)) + " |")
    lines += ["", best_line(result)]
    lines += [f"Early stop: {note}." for note in result.stops]
    lines += [f"Failed: {failure}" for failure in result.failures]
    return "\n".join(lines) + "\n"


def _row(point: PointResult, with_env: bool, best_note: str | None) -> list[str]:
    p = point.point
    cells = [str(p.steps), str(p.topk), str(p.draft_tokens)]
    if with_env:
        cells.append(" ".join(f"{k}={v}" for k, v in p.env))
    figures = point.figures()
    for key, _, shape in COLUMNS:
        value = figures.get(key, math.nan)
        cells.append(shape.format(value) if math.isfinite(value) else "")
    if not point.measured:
        return [*cells, "", "", f"skipped: {point.skipped}"]
    note = best_note or ("clearly worse" if point.clearly_worse else "")
    shown = "yes" if point.equivalent else "no (not gated)" if point.outputs_pass else "**no**"
    return [*cells, shown, f"#{point.run_id}", note]


def best_line(result: SweepResult) -> str:
    """The best configuration: the fastest with equivalent outputs, its accept length shown;
    none when no point beats plain decoding."""
    best = result.best()
    if best is not None and result.none_beats_plain():
        return (
            f"Best: none beats plain decoding (fastest: {_summary(best)}): speculative decoding "
            "costs more than it saves here."
        )
    if best is not None:
        return "Best: " + _summary(best) + "."
    fastest = result.fastest()
    if fastest is None:
        return "Best: none: no point was measured."
    return (
        "Best: none: no point's outputs were equivalent to the plain twin's; the fastest was "
        + _summary(fastest)
        + ", not equivalent."
    )


def _summary(point: PointResult) -> str:
    f = point.figures()
    return (
        f"{point.point.label()}: {f['output_tok_s']:.1f} tok/s ({f['speedup']:.2f}x plain), "
        f"accept length {f['accept_length']:.2f} (run #{point.run_id})"
    )


def sweep_json(result: SweepResult) -> dict[str, Any]:
    """The sweep as JSON-ready values (NaN as null)."""
    best, fastest = result.best(), result.fastest()
    return {
        "name": result.spec.name,
        "scenario": result.scenario,
        "grid": {
            "steps": list(result.spec.steps),
            "topk": list(result.spec.topk),
            "draft_tokens": list(result.spec.draft_tokens),
            "env": {k: list(v) for k, v in result.spec.env.items()},
            "repeats": result.spec.repeats,
        },
        "plain_tok_s": dict(result.plain),
        "plain_reused_from": dict(result.plain_reused),
        "plain_s": dict(result.plain_s),
        "points": [_point_json(p) for p in result.points],
        "best": _point_json(best) if best else None,
        "none_beats_plain": result.none_beats_plain(),
        "fastest": _point_json(fastest) if fastest else None,
        "stops": list(result.stops),
        "failures": list(result.failures),
        "exit_code": int(result.exit_code()),
    }


def _point_json(point: PointResult) -> dict[str, Any]:
    p = point.point
    figures = {k: (v if math.isfinite(v) else None) for k, v in point.figures().items()}
    return {
        "steps": p.steps,
        "topk": p.topk,
        "draft_tokens": p.draft_tokens,
        "env": dict(p.env),
        "sweep": point.label,
        "run": point.run_id,
        "skipped": point.skipped,
        "equivalent": point.equivalent if point.measured else None,
        "clearly_worse": point.clearly_worse,
        **figures,
    }
