"""Time the HTML report over a large history: render time, file size, load time in Chromium.

Builds (once, then reuses) a history of RUNS runs through perfgate's own schema: three
scenarios and a steps sweep on one profile, two branches, METRICS metrics of REPEATS samples
each, phase means, verdicts with their bands, a fingerprint change and steps in the data (so
change points exist). Then it times `perfgate report`'s work (read the history, build, render,
write) in this process, reports the file's size, and, when Chromium and Playwright are there,
opens the file in headless Chromium and times the load: until the charts of the first screen
are drawn (the page's "ready"), and until every chart of the page is ("complete").

    PYTHONPATH=$PWD python benchmarks/report_scale.py                # 10,000 runs x 20 metrics
    PYTHONPATH=$PWD python benchmarks/report_scale.py --runs 1000 --no-browser

Not a test: figures depend on the machine. Goals: render <= 2 s, file <= 3 MB, load <= 1 s.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from history_read import fill_in_batches
from sqlalchemy import insert
from sqlalchemy.orm import Session

from perfgate.store import close_history, open_history
from perfgate.store.models import PhaseRow, RunRow, SampleRow, VerdictRow

PROFILE = "h200x8"
SCENARIOS = ("llama33-70b-eagle3-tp8", "llama31-8b-eagle3-tp1", "qwen3-32b-eagle3-tp4")
PHASES = {"draft": 0.9, "verify": 14.0, "draft_extend": 1.1, "accept": 0.4}
GATED = ("output_tok_s", "verify_ms", "accept_length", "speedup")
PLAIN = {"output_tok_s": 90.0, "cycle_ms": 11.1, "ttft_ms": 48.0}  # the plain twin's levels


def metric_names(count: int) -> list[tuple[str, str]]:
    """(mode, metric): the gate's metrics and the plain twin's first, then made-up ones."""
    known = [("spec", m) for m in ("output_tok_s", "accept_length", "speedup", "verify_ms")]
    known += [("spec", m) for m in ("draft_ms", "draft_extend_ms", "cycle_ms", "ttft_ms")]
    known += [("plain", "output_tok_s"), ("plain", "ttft_ms"), ("plain", "cycle_ms")]
    extra = [("spec", f"metric_{i:02d}") for i in range(count)]
    return (known + extra)[:count]


def synthetic_run(i: int, runs: int, rng: random.Random) -> dict[str, Any]:
    """One run's columns, and its phase levels before noise: verify grows 9% at 60% of the
    history, accept length falls 7% at 30%, torch is upgraded at 80%."""
    sweep = i % 10 == 9  # every tenth run belongs to a steps sweep
    scenario = "sweep-70b" if sweep else SCENARIOS[i % len(SCENARIOS)]
    steps = 1 + (i // 10) % 5 if sweep else 2
    torch = "2.5.1" if i > runs * 0.8 else "2.4.0"
    approved = i // 2500 * 2500  # a baseline approved at the start, then every 2,500 runs

    def verify(at: int) -> float:
        return PHASES["verify"] * (1.09 if at > runs * 0.6 else 1.0)

    def accept(at: int) -> float:
        return (1.0 + 0.8 * math.sqrt(steps)) * (0.93 if at > runs * 0.3 else 1.0)

    return {
        "scenario": scenario,
        "branch": "main" if i % 4 else f"feature/pr-{i // 4 % 50}",
        "pr": None if i % 4 else str(1000 + i // 4 % 50),
        "config": {
            "model": "llama-70b" if sweep else scenario,
            "steps": steps,
            "topk": 1,
            "draft_tokens": steps + 1,
        },
        "fingerprint": {"gpu": "NVIDIA H200", "gpu_count": "8", "torch": torch},
        "verify": verify(i),
        "accept": accept(i),
        "baseline": central_values(verify(approved), accept(approved)),
    }


def central_values(verify: float, accept: float) -> dict[str, float]:
    """The gated metrics' levels for these phase levels."""
    cycle = sum({**PHASES, "verify": verify}.values()) + 0.6
    tok_s = 1000.0 * accept / cycle
    return {"verify_ms": verify, "accept_length": accept, "cycle_ms": cycle,
            "output_tok_s": tok_s, "speedup": tok_s / PLAIN["output_tok_s"]}  # fmt: skip


def fill(url: str, runs: int, metrics: int, repeats: int) -> None:
    """Write `runs` synthetic runs (skipped when the history already has them)."""
    rng = random.Random(7)
    names = metric_names(metrics)

    def write(session: Session, indexes: range) -> None:
        for i in indexes:
            _insert(session, i, synthetic_run(i, runs, rng), names, repeats, rng)

    fill_in_batches(url, runs, write)


def _insert(
    session: Session,
    i: int,
    run: dict[str, Any],
    names: list[tuple[str, str]],
    repeats: int,
    rng: random.Random,
) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=i)
    noisy = central_values(run["verify"] * rng.gauss(1, 0.01), run["accept"] * rng.gauss(1, 0.01))
    verdicts = _verdicts(noisy, run["baseline"])
    row = RunRow(
        scenario=run["scenario"], profile=PROFILE, engine="sglang",
        status="regression" if "regression" in verdicts.values() else "pass",
        started_at=started, finished_at=started + timedelta(minutes=3),
        commit=f"{rng.getrandbits(160):040x}", branch=run["branch"], pr=run["pr"],
        ci_url=f"https://github.com/example/perfgate/actions/runs/{9_000_000 + i}",
        dirty=False, equivalent=True, fingerprint=run["fingerprint"], config=run["config"],
        servers={},
    )  # fmt: skip
    session.add(row)
    session.flush()
    session.execute(insert(SampleRow), [
        {"run_id": row.id, "mode": mode, "metric": name, "repeat": r,
         "value": (PLAIN if mode == "plain" else noisy).get(name, 50.0) * rng.gauss(1.0, 0.02)}
        for mode, name in names for r in range(repeats)
    ])  # fmt: skip
    phase_ms = {**PHASES, "verify": noisy["verify_ms"], "cycle": noisy["cycle_ms"]}
    session.execute(insert(PhaseRow), [
        {"run_id": row.id, "mode": "spec", "phase": phase, "repeat": r, "cycles": 200,
         "median_ms": ms, "mean_ms": ms * rng.gauss(1.0, 0.01), "p90_ms": ms * 1.1}
        for phase, ms in phase_ms.items() for r in range(repeats)
    ])  # fmt: skip
    base = run["baseline"]
    session.execute(insert(VerdictRow), [
        {"run_id": row.id, "metric": m, "status": status, "message": "", "baseline": base[m],
         "current": noisy[m], "change": noisy[m] / base[m] - 1, "tolerance": 0.03}
        for m, status in verdicts.items()
    ])  # fmt: skip


def _verdicts(noisy: dict[str, float], base: dict[str, float]) -> dict[str, str]:
    """Each gated metric judged against the levels its baseline was approved at."""
    result = {}
    for metric in GATED:
        change = noisy[metric] / base[metric] - 1
        worse = change > 0.03 if metric == "verify_ms" else change < -0.03
        better = change < -0.03 if metric == "verify_ms" else change > 0.03
        result[metric] = "regression" if worse else "improvement" if better else "pass"
    return result


def time_render(url: str, out: Path, times: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds per `perfgate report` (open, read, build, render, write), in this
    process (imports done). CPU time says what it costs where other work shares the cores."""
    from perfgate.report import write_history_report

    wall, cpu = [], []
    for _ in range(times):
        began, began_cpu = time.perf_counter(), time.process_time()
        sessions = open_history(url)
        with sessions() as session:
            write_history_report(out, session)
        close_history(sessions)
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return wall, cpu


def time_load(path: Path, times: int) -> tuple[list[float], list[float]] | None:
    """Seconds from navigation until the first screen's charts are drawn, and until every
    chart is (the rest are made once the first screen is painted, a slice at a time), by the
    page's clock; None without Chromium."""
    from tests.report.chromium import open_report, why_unavailable

    if why_unavailable() is not None:
        return None
    first, every = [], []
    with open_report(path) as report:
        for _ in range(times):
            report.load_seconds()
            report.page.wait_for_function("window.perfgateReport.complete")
            timings = report.page.evaluate("window.perfgateReport.timings")
            first.append(timings["readyMs"] / 1000)
            every.append(timings["completeMs"] / 1000)
        charts = report.page.evaluate("window.perfgateReport.made")
        if report.errors:
            print(f"  console errors: {report.errors}")
    print(f"  {charts} charts on the page")
    return first, every


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite:///.perfgate/bench/report-scale.db")
    parser.add_argument("--out", default="reports/bench/index.html")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--times", type=int, default=5, help="renders and loads to time")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium load")
    args = parser.parse_args()
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    fill(args.db, args.runs, args.metrics, args.repeats)
    print(f"history ready in {time.perf_counter() - began:.1f} s: {args.runs} runs x "
          f"{args.metrics} metrics x {args.repeats} repeats at {args.db}")  # fmt: skip
    out = Path(args.out)
    wall, cpu = time_render(args.db, out, args.times)
    _print("render (open, read, build, write), wall", wall)
    _print("render, CPU time of this process", cpu)
    print(
        f"  load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    print(f"  file {out}: {out.stat().st_size / 1e6:.2f} MB")
    load = None if args.no_browser else time_load(out, args.times)
    if load is not None:
        _print("load in Chromium, first screen drawn", load[0])
        _print("load in Chromium, every chart drawn", load[1])
    elif not args.no_browser:
        print("  load: not timed, no Chromium or Playwright here")
    return 0


def _print(name: str, seconds: list[float]) -> None:
    print(f"  {name}: median {statistics.median(seconds):.3f} s, min {min(seconds):.3f} s, "
          f"max {max(seconds):.3f} s over {len(seconds)}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
