"""The steps of benchmarks/gpu_gate_proof.sh that read the history: plan, verdict rows, record.

    python benchmarks/gate_proof.py plan --db DB --baseline FILE --config TOML --scenario S
    python benchmarks/gate_proof.py verdict --db DB --kind KIND --exit CODE --out verdicts.jsonl
    python benchmarks/gate_proof.py record --state DIR --out proof.md
    python benchmarks/gate_proof.py config --config TOML --scenario S --max-runs N --out TOML
    python benchmarks/gate_proof.py weights --config TOML --scenario S --state DIR

- ``plan``: from the approved baseline, what a verdict will take (perfgate.gate.planning, at
  what its approved runs took) and the ``--debug-slow-phase cycle=F`` that costs 6% of
  tok/s: a repeat of the baseline takes ``T = tokens / tok_s``, its decode cycles ``D = (new
  tokens / accept length) x cycle ms``, and ``T / (T + F D) = 0.94``. Prints ``F`` (the shell
  reads it) and writes plan.md beside the baseline; with ``--estimate-out`` also the seconds
  a verdict's first look takes there (its planned runs at what an approved run took, and
  RUN_OVERHEAD_S each), which the shell keeps a call's last verdict within its time by.
- ``verdict``: the newest run's verdicts (the last run of one `perfgate run`), as one JSON
  line: its kind, exit code, status, every metric's status and change, the runs it took, the
  runs planned, and the runner time, with the why line of tok/s and decode_tok_s.
- ``record``: proof.md, the record of the whole proof: the diagnosis of the launches, the
  placement of the servers per launch with the sidecar's host speed beside the run's host
  phases (and how the two correlate across launches), the ten launches' noise, the plan, and
  the verdicts.
- ``config``: a copy of the config whose scenario ``S`` takes at most ``N`` runs a verdict
  (its ``max_runs``), everything else as it was: ``max_runs`` shapes no figure, so the
  scenario's digest, and every run's fingerprint, stay the shipped scenario's. Exits 64 on a
  scenario the config does not hold.
- ``weights``: the identities of the scenario's target and draft as a run's fingerprint
  names them (a digest of each config and its weights, model_dirs.model_identity), written
  to ``DIR/weights.json`` the first time and compared with it after: a series launched on
  one lease goes on in the next only where that lease trained the same bytes. Exits 64 where
  they differ (the series cannot go on: STATE elsewhere starts another), 69 where the
  weights are missing.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.baselines import load_baseline
from perfgate.config import load_config
from perfgate.gate import DEFAULT_BETA
from perfgate.gate.planning import plan_runs
from perfgate.measured_verdicts import RUN_OVERHEAD_S

KINDS = ("unchanged", "tok_s_minus_6", "verify_plus_2")
LOSS = 0.06
# The spread before any cure: the ten launches of benchmarks/results/h200-real-weights.md, its
# first section (2026-12-01, fifth; h200-real-weights/2026-12-01-ends/noise.md).
BEFORE = (
    "between launches spec tok/s 2.63%, plain tok/s 3.25%, speedup 3.95%, verify 0.10% "
    "(benchmarks/results/h200-real-weights.md, its first section)"
)


def injection_fraction(baseline_runs: list[dict[str, Any]], tokens: int, new_tokens: int) -> float:
    """The cycle slowdown F that costs LOSS of tok/s (see the module's description).

    >>> round(injection_fraction([{"samples": {"output_tok_s": [11680.0],
    ...     "accept_length": [3.765]}, "phase_ms": {"spec": {"cycle": [2.086]}}}], 2048, 256), 4)
    0.0789
    """
    repeat_ms, decode_ms = [], []
    for run in baseline_runs:
        samples, cycle = run["samples"], run["phase_ms"]["spec"]["cycle"]
        for tok_s, accept, cycle_ms in zip(
            samples["output_tok_s"], samples["accept_length"], cycle, strict=False
        ):
            repeat_ms.append(tokens / tok_s * 1000.0)
            decode_ms.append(new_tokens / accept * cycle_ms)
    ratio: float = statistics.median(repeat_ms) / statistics.median(decode_ms)
    return (1.0 / (1.0 - LOSS) - 1.0) * ratio


def plan(args: argparse.Namespace) -> int:
    baseline = load_baseline(args.baseline)
    scenario = load_config(args.config).scenarios[args.scenario]
    document = json.loads(args.baseline.read_text())
    tokens = len(scenario.prompts) * scenario.max_new_tokens
    fraction = injection_fraction(document["runs"], tokens, scenario.max_new_tokens)
    run_s = _median_run_s(args.db, [r.run_id for r in baseline.runs if r.run_id is not None])
    budget = max(int(scenario.max_runner_s // (run_s + RUN_OVERHEAD_S)), 1) if run_s else None
    found = plan_runs(
        baseline.metric_runs(),
        baseline.tolerances,
        baseline.gated,
        alpha=load_config(args.config).alpha,
        beta=DEFAULT_BETA,
        max_runs=scenario.max_runs,
        budget_runs=budget,
    )
    lines = [
        f"Plan of a verdict against {len(baseline.runs)} approved runs of {args.scenario}: "
        f"{found.describe()}; a run's measurement took {run_s:.0f} s (median), so at most "
        f"{budget} runs fit max_runner_s = {scenario.max_runner_s:g}.",
        "",
        "| metric | tolerance | approved launches scatter | first look needs | "
        "detection at twice the tolerance by the last look |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for m in found.metrics:
        lines.append(
            f"| {m.metric} | {baseline.tolerances.get(m.metric, 0.03):.1%} | "
            f"{'-' if m.run_sd is None else f'{m.run_sd:.2%}'} | "
            f"{m.first_look or 'more than the budget'} | "
            f"{'-' if m.detection is None else f'{m.detection:.1%}'} |"
        )
    lines += [
        "",
        f"The tok/s -6% injection: `PERFGATE_DEBUG_SLOW_PHASE=cycle={fraction:.4f}` (every "
        "decode cycle that much longer, from the approved runs' tok/s, accept length and cycle "
        f"time); the verify one: `PERFGATE_DEBUG_SLOW_PHASE=verify={args.verify:g}`.",
    ]
    (args.baseline.parent / "plan.md").write_text("\n".join(lines) + "\n")
    if args.estimate_out is not None:
        first_look_s = found.first_look * (run_s + RUN_OVERHEAD_S)
        args.estimate_out.write_text(f"{first_look_s:.0f}\n")
    print(f"{fraction:.4f}")
    return 0


def _median_run_s(db: Path, ids: list[int]) -> float:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            f"SELECT started_at, finished_at FROM runs WHERE id IN ({','.join('?' * len(ids))})",
            ids,
        ).fetchall()
    from datetime import datetime

    took = [
        (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() for a, b in rows
    ]
    return statistics.median(took) if took else 0.0


def verdict(args: argparse.Namespace) -> int:
    from perfgate.store import history, load_run

    with sqlite3.connect(args.db) as connection:
        (last,) = connection.execute("SELECT max(id) FROM runs").fetchone()
    with history(f"sqlite:///{args.db}", existing=True) as sessions, sessions() as session:
        record = load_run(session, last)
    verdicts = {v.metric: v for v in record.verdicts}
    first = next(iter(verdicts.values()), None)
    why = {
        m: v.attribution.summary
        for m, v in verdicts.items()
        if v.attribution is not None and m in ("output_tok_s", "decode_tok_s")
    }
    row = {
        "kind": args.kind,
        "exit": args.exit,
        "run": last,
        "status": record.status.value,
        "injected": record.measurement.fingerprint.get("injected_slowdown"),
        "metrics": {m: [v.status.value, v.change] for m, v in verdicts.items()},
        "runs": first.runs if first else None,
        "planned_runs": first.planned_runs if first else None,
        "run_budget": first.run_budget if first else None,
        "runner_s": first.runner_s if first else None,
        # The approved runs it was judged by, and the words that say whose (this machine's own
        # alone, where the baseline holds enough of them: perfgate.reference.machine_reference).
        "baseline_runs": first.baseline_runs if first else None,
        "machine": record.measurement.fingerprint.get("machine"),
        "judged_against": record.judged_against,
        "wall_s": args.wall_s,
        "why": why,
    }
    with args.out.open("a") as handle:
        handle.write(json.dumps(row) + "\n")
    print(json.dumps(row))
    return 0


def record(args: argparse.Namespace) -> int:
    state = args.state
    parts = ["# The gate on a GPU: the launch spread's source, the launches, verdicts", ""]
    cure = (state / "cure").read_text().strip() if (state / "cure").is_file() else "as-placed"
    capped = (state / "max-runs").read_text().strip() if (state / "max-runs").is_file() else None
    parts += [
        f"Every `perfgate run` of the series and its verdicts placed {cure} (CURE; "
        "benchmarks/launch_states.py --run-as). Before, as placed: the committed record's ten "
        f"launches, {BEFORE}.",
        "",
        f"Every verdict took at most {capped} run{'s' if capped != '1' else ''} (MAX_RUNS: the "
        "scenario's max_runs alone changed), the first look as planned within them; "
        "benchmarks/gate_quality_gpu.py predicts the rates at that setting."
        if capped
        else "Every verdict took the runs the scenario's max_runs and max_runner_s allow.",
        "",
    ]
    for title, name in (
        ("Where the between-launch spread comes from (benchmarks/launch_states.py)",
         "diagnose/results.md"),
        ("The series of launches: their noise (benchmarks/launch_noise.py)", "noise.md"),
        ("The plan a verdict follows", "baselines/plan.md"),
    ):  # fmt: skip
        path = state / name
        body = path.read_text() if path.is_file() else "(not measured)\n"
        parts += [f"## {title}", "", body]
    parts += ["## Where the servers ran in each launch (benchmarks/server_placement.py)", ""]
    parts += _placement(state / "placement.jsonl", state / "launch-runs.txt", state / "history.db")
    parts += ["", "## Verdicts", ""]
    parts += _verdicts(state / "verdicts.jsonl")
    args.out.write_text("\n".join(parts) + "\n")
    print(args.out.read_text())
    return 0


def _placement(path: Path, runs: Path, db: Path) -> list[str]:
    """Per launch: where its servers ran, the sidecar's host speed while each ran, and the
    run's host-bound phases (prefill, accept) beside its GPU-bound one (verify)."""
    if not path.is_file():
        return ["(not measured)"]
    run_of = dict(line.split() for line in runs.read_text().splitlines()) if runs.is_file() else {}
    lines = [
        "| launch | run | spec: busiest thread's CPUs, nodes sampled | plain: the same | "
        "spec: sidecar loop us on its CPU (range), steal, huge pages | plain: the same | "
        "spec prefill / accept / verify ms |",
        "| ---: | ---: | --- | --- | --- | --- | --- |",
    ]
    loops: list[float] = []  # the sidecar's loop us beside the spec server, per launch
    host: dict[str, list[float]] = {"accept": [], "prefill": []}  # its phases, the same launches
    for line in path.read_text().splitlines():
        row = json.loads(line)
        run = run_of.get(row["label"])
        cells, speeds = [], []
        for mode in ("spec", "plain"):
            seen = row.get(mode)
            cells.append(
                f"{seen['busiest_thread_cpus']}, {seen['nodes']} (of {seen['allowed_cpus']})"
                if seen
                else "-"
            )
            speeds.append(_sidecar(seen))
        phases = _host_phases(db, int(run)) if run and db.is_file() else {}
        shown = " / ".join(
            f"{phases[p]:.3f}" if p in phases else "-" for p in ("prefill", "accept", "verify")
        )
        loop = (row.get("spec") or {}).get("sidecar_loop_us")
        if loop is not None and all(p in phases for p in host):
            loops.append(loop)
            for phase, values in host.items():
                values.append(phases[phase])
        lines.append(
            f"| {row['label']} | {run or '-'} | {cells[0]} | {cells[1]} | {speeds[0]} | "
            f"{speeds[1]} | {shown} |"
        )
    together = {
        phase: statistics.correlation(loops, values)
        for phase, values in host.items()
        if len(loops) >= 3 and len(set(loops)) > 1 and len(set(values)) > 1
    }
    if together:
        said = " and ".join(f"its {p} r = {r:+.2f}" for p, r in together.items())
        lines += [
            "",
            f"Across {len(loops)} launches the sidecar's loop and the spec server's host "
            f"phases correlate: {said}. Near +1, a slow launch is a slow state of the machine "
            "(a window the sidecar sees too); near 0 with the phase still scattering, a state "
            "of the server's own process.",
        ]
    return lines


def _sidecar(seen: dict[str, Any] | None) -> str:
    if not seen or seen.get("sidecar_loop_us") is None:
        return "-"
    low, high = seen["sidecar_loop_range_us"]
    steal, huge = seen.get("steal_share"), seen.get("anon_huge_pages_kb")
    stolen = "-" if steal is None else f"{steal:.1%}"
    pages = "-" if huge is None else f"{huge / 1024:.0f} MiB"
    return f"{seen['sidecar_loop_us']:.0f} ({low:.0f}-{high:.0f}), {stolen}, {pages}"


def _host_phases(db: Path, run: int) -> dict[str, float]:
    """The spec server's mean ms per phase in run ``run``, over its repeats."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT phase, AVG(mean_ms) FROM phases WHERE run_id = ? AND mode = 'spec' "
            "GROUP BY phase",
            (run,),
        ).fetchall()
    return {phase: float(ms) for phase, ms in rows}


def _judged_by(row: dict[str, Any]) -> str:
    """Which approved runs judged a verdict: its machine's own, or all (rows of older calls
    recorded neither)."""
    count = row.get("baseline_runs")
    if count is None:
        return "-"
    from perfgate.reference import OWN_MACHINE

    own = OWN_MACHINE in (row.get("judged_against") or "")
    return f"{count} of its machine" if own else f"{count} (all)"


def _verdicts(path: Path) -> list[str]:
    if not path.is_file():
        return ["(none judged)"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [
        "| kind | run | exit | status | output_tok_s | speedup | verify_ms | decode_tok_s | "
        "runs (planned first look / most) | judged by | runner time | wall |",
        "| --- | ---: | ---: | --- | --- | --- | --- | --- | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        cells = []
        for metric in ("output_tok_s", "speedup", "verify_ms", "decode_tok_s"):
            status, change = r["metrics"].get(metric, ["-", None])
            cells.append(status if change is None else f"{status} {change:+.1%}")
        runner = "-" if r["runner_s"] is None else f"{r['runner_s']:.0f} s"
        lines.append(
            f"| {r['kind']} | {r['run']} | {r['exit']} | {r['status']} | {' | '.join(cells)} | "
            f"{r['runs']} ({r['planned_runs']} / {r['run_budget']}) | {_judged_by(r)} | "
            f"{runner} | {r['wall_s']} s |"
        )
    lines += [
        "",
        "| kind | verdicts | regression | pass | inconclusive | mean runs | mean runner time |",
    ]
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        count = {
            s: sum(r["status"] == s for r in mine) for s in ("regression", "pass", "inconclusive")
        }
        mean_runs = statistics.fmean(r["runs"] or 0 for r in mine)
        mean_runner_s = statistics.fmean(r["runner_s"] or 0 for r in mine)
        lines.append(
            f"| {kind} | {len(mine)} | {count['regression']} | {count['pass']} | "
            f"{count['inconclusive']} | {mean_runs:.2f} | {mean_runner_s:.0f} s |"
        )
    lines += ["", "Why lines:", ""]
    lines += [f"- run {r['run']} ({r['kind']}): {w}" for r in rows for w in r["why"].values()]
    return lines


def capped_config(text: str, scenario: str, max_runs: int) -> str:
    """The config's text with ``scenario``'s ``max_runs`` set to ``max_runs`` (see ``config``).

    >>> print(capped_config("[scenarios.a]\nmax_runs = 10\n[scenarios.a.tolerances]\n", "a", 3))
    [scenarios.a]
    max_runs = 3
    [scenarios.a.tolerances]
    <BLANKLINE>
    """
    lines = text.splitlines(keepends=True)
    header = f"[scenarios.{scenario}]"
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == header)
    except StopIteration:
        raise ValueError(f"no table {header}") from None
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines)
    )
    setting = f"max_runs = {max_runs}\n"
    for i in range(start + 1, end):
        if lines[i].split("=", 1)[0].strip() == "max_runs":
            lines[i] = setting
            break
    else:
        lines.insert(start + 1, setting)
    return "".join(lines)


def config(args: argparse.Namespace) -> int:
    from dataclasses import replace

    shipped = load_config(args.config)
    if args.scenario not in shipped.scenarios:
        print(
            f"{args.config}: no scenario {args.scenario!r} (--scenario; one of "
            f"{', '.join(sorted(shipped.scenarios))})",
            file=sys.stderr,
        )
        return 64
    text = capped_config(args.config.read_text(), args.scenario, args.max_runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(text)
    capped = load_config(partial).scenarios[args.scenario]
    wanted = replace(shipped.scenarios[args.scenario], max_runs=args.max_runs)
    if capped != wanted:  # the copy must differ in max_runs alone
        partial.unlink()
        print(f"{args.config}: could not set max_runs of {args.scenario} alone", file=sys.stderr)
        return 70
    partial.replace(args.out)
    return 0


def weights(args: argparse.Namespace) -> int:
    from perfgate.engines.embedded.model_dirs import model_identity, resolve_model
    from perfgate.errors import PerfgateError

    scenario = load_config(args.config).scenarios.get(args.scenario)
    if scenario is None:
        print(f"{args.config}: no scenario {args.scenario!r} (--scenario)", file=sys.stderr)
        return 64
    try:
        for name in (scenario.model, scenario.draft):
            if (missing := resolve_model(name).missing_weights()) is not None:
                raise missing
        found = {"model": model_identity(scenario.model), "draft": model_identity(scenario.draft)}
    except (PerfgateError, OSError) as error:
        print(f"weights of {args.scenario}: {error}", file=sys.stderr)
        return 69
    record = args.state / "weights.json"
    if not record.is_file():
        args.state.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(record.name + ".partial")
        partial.write_text(json.dumps(found, indent=1) + "\n")
        partial.replace(record)
        print(f"weights of the series: {found['model']}, {found['draft']} ({record})")
        return 0
    series = json.loads(record.read_text())
    if series != found:
        print(
            f"{record}: the series was launched with {series['model']} and {series['draft']}; "
            f"this machine has {found['model']} and {found['draft']}: its runs would not match "
            "the series' fingerprints. Train on a machine of the series' kind and software, or "
            "give STATE another folder to start a series on these weights.",
            file=sys.stderr,
        )
        return 64
    print(f"weights as the series': {found['model']}, {found['draft']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--db", type=Path, required=True)
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--verify", type=float, default=0.02, help="the verify slowdown injected")
    p.add_argument("--estimate-out", type=Path, help="write a first look's seconds here")
    v = sub.add_parser("verdict")
    v.add_argument("--db", type=Path, required=True)
    v.add_argument("--kind", choices=KINDS, required=True)
    v.add_argument("--exit", type=int, required=True)
    v.add_argument("--wall-s", type=int, default=None)
    v.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("record")
    r.add_argument("--state", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("config")
    c.add_argument("--config", type=Path, required=True)
    c.add_argument("--scenario", required=True)
    c.add_argument("--max-runs", type=int, required=True)
    c.add_argument("--out", type=Path, required=True)
    w = sub.add_parser("weights")
    w.add_argument("--config", type=Path, required=True)
    w.add_argument("--scenario", required=True)
    w.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    commands = {
        "plan": plan,
        "verdict": verdict,
        "record": record,
        "config": config,
        "weights": weights,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
