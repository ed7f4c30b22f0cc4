"""A profile as a table (markdown, printed as is) and as JSON. Pure."""

from __future__ import annotations

import statistics
from typing import Any

from perfgate import metrics
from perfgate.profile.categories import CATEGORIES
from perfgate.profile.trace import Breakdown, ProfileResult

PHASE_ORDER = (*metrics.NAMED_PHASES, metrics.OTHER, metrics.PREFILL)
TOP_N = 8  # kernels (or ops) listed per phase: what each category is made of
NAME_CHARS = 100  # a C++ kernel name is cut here; the trace has it whole


def phase_table(breakdown: Breakdown) -> dict[str, dict[str, Any]]:
    """Per phase: ms per profiled cycle in each category, their total, and the count."""
    per_cycle = max(breakdown.cycles, 1)
    table = {}
    for phase in sorted(breakdown.us, key=PHASE_ORDER.index):
        row = breakdown.us[phase]
        table[phase] = {
            "ms_per_cycle": {c: row[c] / per_cycle / 1e3 for c in CATEGORIES},
            "total_ms_per_cycle": sum(row.values()) / per_cycle / 1e3,
            "count": breakdown.counts.get(phase, 0),
            "top": [
                {"name": name, "category": category, "ms_per_cycle": us / per_cycle / 1e3}
                for name, category, us in breakdown.top(phase, TOP_N)
            ],
        }
    return table


def profile_json(result: ProfileResult, trace_name: str) -> dict[str, Any]:
    """Everything the profile found, as JSON-ready values."""
    overhead = result.overhead
    phases = phase_table(result.breakdown)
    return {
        "scenario": result.scenario,
        "mode": result.mode,
        "command": result.command,
        "device_name": result.server_info.get("device_name"),
        "torch_version": result.server_info.get("torch_version"),
        "source": result.breakdown.source,
        "cycles": result.breakdown.cycles,
        "categories": list(CATEGORIES),
        "phases": phases,
        "unattributed_ms": result.breakdown.unattributed_us / 1e3,
        "coverage": coverage(phases, result.cycle_ms_inside),
        "busy": busy(phases, result.phase_ms_outside),
        "overhead": {
            "cycle_ms_outside": _median(result.cycle_ms_outside),
            "cycle_ms_inside": _median(result.cycle_ms_inside),
            "cycles_outside": len(result.cycle_ms_outside),
            "cycles_inside": len(result.cycle_ms_inside),
            "change": overhead,
        },
        "tok_s": list(result.tok_s),
        "window": result.window,
        "trace": trace_name,
    }


def coverage(phases: dict[str, dict[str, Any]], cycle_ms: tuple[float, ...]) -> float | None:
    """The work the trace shows per cycle over the cycle time the probe measured.

    Near 1 on a busy GPU; far below it, the trace misses work (kernels replayed from CUDA
    graphs that the profiler did not see, say). On a CPU, Python's own time between
    operators is not in the trace, so it stays well below 1.
    """
    if not cycle_ms:
        return None
    work = sum(row["total_ms_per_cycle"] for p, row in phases.items() if p != metrics.PREFILL)
    return float(work) / statistics.median(cycle_ms)


def busy(phases: dict[str, dict[str, Any]], window_ms: dict[str, float]) -> dict[str, Any]:
    """Per phase the probe timed: its window (ms, unprofiled) and the trace's work over it.

    On a GPU, a share well below 1 is a phase that waits on the host: its kernels are launched
    (or replayed) after the window opens, and the device idles between them.
    """
    shown = {}
    for phase, window in window_ms.items():
        if phase in phases and window > 0:
            work = phases[phase]["total_ms_per_cycle"]
            shown[phase] = {"window_ms": window, "share": work / window}
    return shown


def render_markdown(report: dict[str, Any], focus: str = metrics.VERIFY) -> str:
    """The profile's tables: work per phase and category, the focus phase's split, the cost."""
    unit = "kernel" if report["source"].startswith("GPU") else "op"
    lines = [
        f"# Profile of {report['scenario']} ({report['mode']} server) on {report['device_name']}",
        "",
        f"{report['cycles']} decode cycles profiled; {report['source']} per phase and category, "
        "in ms per cycle; trace: `" + report["trace"] + "`.",
        "",
        f"| phase | {' | '.join(report['categories'])} | total | {unit}s in all "
        "| window (probe) | busy |",
        "| --- |" + " ---: |" * (len(report["categories"]) + 4),
    ]
    shares = report.get("busy") or {}
    for phase, row in report["phases"].items():
        cells = [
            _ms_share(row["ms_per_cycle"][c], row["total_ms_per_cycle"])
            for c in row["ms_per_cycle"]
        ]
        seen = shares.get(phase)
        window = f"{seen['window_ms']:.3f} | {seen['share']:.0%}" if seen else "- | -"
        lines.append(
            f"| {phase} | {' | '.join(cells)} | {row['total_ms_per_cycle']:.3f} | {row['count']} "
            f"| {window} |"
        )
    if shares:
        lines += [
            "",
            f"window (probe): each phase's ms per cycle as the probe timed it, unprofiled; busy: "
            f"the {unit}s' time inside it over the window (well below 100%: the phase waits on "
            "the host).",
        ]
    lines += ["", _focus_line(report, focus), *_top_lines(report, focus, unit)]
    lines += ["", _overhead_line(report["overhead"])]
    if report["coverage"] is not None:
        lines.append(
            f"The trace's work adds up to {report['coverage']:.0%} of the profiled cycles' time."
        )
    if report["unattributed_ms"]:
        lines.append(f"Outside every phase range: {report['unattributed_ms']:.3f} ms in all.")
    lines += ["", f"Server: `{report['command']}`"]
    return "\n".join(lines) + "\n"


def _ms_share(ms: float, total: float) -> str:
    return f"{ms:.3f} ({ms / total:.0%})" if total else f"{ms:.3f}"


def _focus_line(report: dict[str, Any], focus: str) -> str:
    row = report["phases"].get(focus)
    if row is None:
        return f"No {focus} work in the profiled cycles."
    total = row["total_ms_per_cycle"]
    parts = sorted(row["ms_per_cycle"].items(), key=lambda item: -item[1])
    split = ", ".join(f"{c} {ms / total:.0%}" for c, ms in parts if ms) if total else "nothing"
    cycle = sum(r["total_ms_per_cycle"] for p, r in report["phases"].items() if p != "prefill")
    share = f"{total / cycle:.0%} of the cycle's work; " if cycle else ""
    return f"**{focus}**: {total:.3f} ms per cycle, {share}{split}."


def _top_lines(report: dict[str, Any], focus: str, unit: str) -> list[str]:
    top = report["phases"].get(focus, {}).get("top") or []
    if not top:
        return []
    lines = [
        "",
        f"The {unit}s that took longest in {focus}:",
        "",
        "| ms per cycle | category | name |",
    ]
    lines.append("| ---: | --- | --- |")
    for item in top:
        name = item["name"].replace("|", "\\|").replace("`", "'")
        if len(name) > NAME_CHARS:
            name = name[: NAME_CHARS - 3] + "..."
        lines.append(f"| {item['ms_per_cycle']:.3f} | {item['category']} | `{name}` |")
    return lines


def _overhead_line(overhead: dict[str, Any]) -> str:
    if overhead["change"] is None:
        return "Profiler overhead: unknown (the engine gave no profiled window to compare)."
    return (
        f"Profiler overhead: profiled cycles took {overhead['cycle_ms_inside']:.3f} ms "
        f"(median of {overhead['cycles_inside']}) against {overhead['cycle_ms_outside']:.3f} ms "
        f"for the same cycles unprofiled (median of {overhead['cycles_outside']}): "
        f"{overhead['change']:+.1%}."
    )


def _median(values: tuple[float, ...]) -> float | None:
    return statistics.median(values) if values else None
