"""How well `perfgate plan` predicts the sweep it replaces, and what it costs against it.

    python benchmarks/plan_accuracy.py                                  # CPU: embedded-default
    python benchmarks/plan_accuracy.py --scenario embedded-large-gpu --sweep-steps 1-10 \\
        --out benchmarks/results/plan-h200.md                           # one H200

On an H200 the large configuration needs its trained weights in the machine's model cache
first (`benchmarks/gpu_real_weights.sh OUT train`, about 5 minutes, in a call of its own);
then the command above runs the sweep's 11 servers and the plan's 4; a fresh `perfgate run`
of that scenario (two servers) took 49-56 s on an H200 (benchmarks/results/h200-real-weights.md),
so about 7 minutes, inside one 10-minute call; but on H100 hosts the sweep alone took 217 s,
292 s and, where the servers started twice as slowly, 476 s (benchmarks/results/
plan-h100-prefill-graphs.md), too long to plan after it in the same call: there, `--only
sweep` (below). The plan profiles at the sweep's largest step
count (`--plan-steps`, 10 there), so that it predicts every step count the sweep measures
and times no longer chain than the sweep does. Where a lease is too short to train,
`--config benchmarks/plan-gpu-seeded.toml --scenario embedded-large-gpu-seeded` plans the same
configuration with seeded weights and simulated acceptance: the GPU's costs, untrained.

Per round: `perfgate sweep --steps SWEEP --no-early-stop` measures every step count (one
server launch each, the plain twin once), then `perfgate plan --steps PLAN --confirm N`
predicts them from one profiled launch and confirms its fastest. Both record into one
history (a temporary SQLite file), under names of their own per round; every measured
figure is read back from it the same way (perfgate.plan.compare.measured_figures: median
tok/s over the repeats, each phase's mean ms per cycle), so the two are compared on equal
terms. `--rounds R` alternates them R times, so a machine whose load drifts weighs on both;
with more than one round the accuracy goals are judged on the medians over the rounds (per
step count, the sweeps' tok/s against the plans' predictions), which average each launch's
own level out of both sides, and each round's table stays beside them.
Where the sweep and the plan do not fit one call of a lent machine, `--work DIR --only sweep`
runs the sweeps into a history kept in DIR, and a second call with the same `--work` plans and
writes the record; a command that ended in an earlier call is not run again (its exit, time
and output are kept in DIR).

The record (`--out`, markdown) gives the machine, the commands, per step count the sweep's
tok/s, accept length and cycle beside the plan's predictions with their intervals and the
errors, the confirmed points, the runner times, and the goals: the predicted best step
count's measured tok/s within 3% of the sweep's best; every predicted tok/s within 5% of the
measured one; the plan's cost at most a third of the sweep's. The commands' own tables and
JSON go beside it (`<out without .md>/`), this machine's paths written as names
(benchmarks/portable_paths.py). Exit code: 0 when both commands ran (whatever the goals
say), 1 otherwise; where no round produced both (a sweep that failed is not planned
against, and its reason is printed), the record is not written, so an earlier one stays.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argv import without_flag  # the script's own folder is on sys.path
from portable_paths import default_names, portable

REPO = Path(__file__).resolve().parent.parent

GOAL_BEST = 0.03  # the predicted best's measured tok/s within this of the sweep's best
GOAL_EACH = 0.05  # every predicted tok/s within this of the measured one
GOAL_COST = 1 / 3  # the plan's runner time at most this share of the sweep's


@dataclass
class Command:
    argv: list[str]
    wall_s: float
    code: int
    stdout: str
    stderr: str


def run(argv: list[str], log: Path, done_file: Path | None = None) -> Command:
    """Run a perfgate command, timed, its output kept in `log` and echoed as it goes.

    With `done_file` (in --work), a command that ended (exit 0 or 1) in an earlier call is not
    run again: its exit, time and output are read back from that file.
    """
    if done_file is not None and done_file.is_file():
        was = json.loads(done_file.read_text())
        if _same_command(was["argv"], argv) and was["code"] in (0, 1):
            print(
                f"{shlex.join(argv[2:])}: done in an earlier call, exit {was['code']}, "
                f"{was['wall_s']:.0f} s",
                flush=True,
            )
            return Command(argv, was["wall_s"], was["code"], was["stdout"], "")
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    wall = time.monotonic() - started
    log.write_text(f"$ {shlex.join(argv)}\n{done.stderr}\n{done.stdout}")
    print(f"{shlex.join(argv[2:])}: exit {done.returncode}, {wall:.0f} s", flush=True)
    if done.returncode not in (0, 1):  # it did not measure: say why, in its own words
        for line in done.stderr.strip().splitlines()[-5:]:
            print(f"  {line}", flush=True)
    if done_file is not None:
        done_file.write_text(
            json.dumps(
                {"argv": argv, "code": done.returncode, "wall_s": wall, "stdout": done.stdout}
            )
        )
    return Command(argv, wall, done.returncode, done.stdout, done.stderr)


def _same_command(was: list[str], now: list[str]) -> bool:
    """The same command but for where its tables go (each call of a lent machine writes to a
    fresh output folder)."""
    return without_flag(without_flag(was, "--json"), "--markdown") == without_flag(
        without_flag(now, "--json"), "--markdown"
    )


def perfgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "perfgate", *args]


def measured_by_steps(db: str, scenario: str) -> dict[int, dict[str, Any]]:
    """Each recorded run of `scenario` (a sweep's or a plan's name): its steps -> figures."""
    from perfgate.plan.compare import measured_figures
    from perfgate.store import close_history, list_runs, open_history

    sessions = open_history(db)
    try:
        with sessions() as session:
            runs = [r for r in list_runs(session) if r.measurement.scenario == scenario]
    finally:
        close_history(sessions)
    found: dict[int, dict[str, Any]] = {}
    for record in runs:
        figures: dict[str, Any] = dict(measured_figures(record.measurement))
        figures["run"] = record.id
        figures["equivalent"] = record.measurement.equivalence.ok
        found[int(record.measurement.config["steps"])] = figures
    return found


def machine() -> list[str]:
    """What the record says of the machine and the installation."""
    import torch

    cpu = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    lines = [
        f"- CPU: {cpu}, {os.cpu_count()} cores; load average at the start "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}",
        f"- Python {platform.python_version()}, torch {torch.__version__}",
    ]
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        lines.append(f"- GPU: {name} x{torch.cuda.device_count()}, CUDA {torch.version.cuda}")
        lines.append(f"- driver: {_nvidia_smi('driver_version')}")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.strip()
    lines.append(
        f"- perfgate at commit {commit or 'unknown'}{' (uncommitted changes)' if dirty else ''}, "
        "installed editable in the checkout's environment"
    )
    return lines


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _nvidia_smi(field: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


@dataclass
class Round:
    index: int
    sweep: Command
    plan: Command
    swept: dict[int, dict[str, Any]]
    planned: dict[int, dict[str, Any]]  # the plan's own measured runs (profiled, confirmed)
    document: dict[str, Any]  # the plan's JSON
    sweep_document: dict[str, Any] = field(default_factory=dict)  # the sweep's JSON


def one_round(index: int, args: argparse.Namespace, db: str, raw: Path) -> Round | Command:
    """Sweep, then plan; the sweep alone where `--only sweep` stops after it or where it
    failed (exit neither 0 nor 1: there is nothing to plan against)."""

    def done_file(name: str) -> Path | None:
        return args.work / f"{name}.done.json" if args.work is not None else None

    sweep_name, plan_name = f"{args.scenario}-sweep-{index}", f"{args.scenario}-plan-{index}"
    common = ["--config", str(args.config), "--scenario", args.scenario, "--db", db]
    if args.repeats:
        common += ["--repeats", str(args.repeats)]
    if args.plain_max_age_h:
        common += ["--plain-max-age-h", str(args.plain_max_age_h)]
    sweep = run(
        perfgate(
            "sweep",
            *common,
            *("--name", sweep_name, "--steps", args.sweep_steps, "--no-early-stop"),
            *(
                "--json",
                str(raw / f"sweep-{index}.json"),
                "--markdown",
                str(raw / f"sweep-{index}.md"),
            ),
        ),
        raw / f"sweep-{index}.log",
        done_file(f"sweep-{index}"),
    )
    if args.only == "sweep" or sweep.code not in (0, 1):
        return sweep
    plan = run(
        perfgate(
            "plan",
            *common,
            *("--name", plan_name, "--steps", str(args.plan_steps)),
            *("--confirm", str(args.confirm), "--seed", str(args.seed)),
            *(
                "--json",
                str(raw / f"plan-{index}.json"),
                "--markdown",
                str(raw / f"plan-{index}.md"),
            ),
        ),
        raw / f"plan-{index}.log",
        done_file(f"plan-{index}"),
    )
    return Round(
        index,
        sweep,
        plan,
        measured_by_steps(db, sweep_name),
        measured_by_steps(db, plan_name),
        _json_or_empty(raw / f"plan-{index}.json"),
        _json_or_empty(raw / f"sweep-{index}.json"),
    )


def _json_or_empty(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def plain_twins(r: Round) -> tuple[float, bool]:
    """The seconds the sweep spent on plain twins it measured, and whether the plan reused
    its plain twin from the history (--plain-max-age-h) instead of measuring one."""
    reused = r.sweep_document.get("plain_reused_from", {})
    sweep_plain_s = sum(
        seconds
        for label, seconds in r.sweep_document.get("plain_s", {}).items()
        if label not in reused
    )
    plan_reused = any(p.get("plain_reused_from") is not None for p in r.document.get("plans", []))
    return sweep_plain_s, plan_reused


def _estimate(point: dict[str, Any], figure: str) -> tuple[float, float, float]:
    value, low, high = point[figure]
    return value, low, high


def round_section(r: Round, plan_steps: int) -> tuple[list[str], dict[str, Any]]:
    """The round's table and what it found against the goals."""
    (plan,) = r.document["plans"]
    predicted = {p["steps"]: p for p in plan["predicted"]}
    lines = [
        f"### Round {r.index}",
        "",
        "| steps | sweep tok/s | predicted tok/s (95%) | error | refit tok/s | error | "
        "sweep accept length | predicted | sweep cycle ms | predicted | refit | "
        "plan's own measurement |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    refit = {p["steps"]: p for p in plan.get("refit", [])}
    errors: dict[int, float] = {}
    refit_errors: dict[int, float] = {}  # at the step counts the plan did not measure
    for steps in sorted(set(r.swept) | set(predicted)):
        truth, guess = r.swept.get(steps), predicted.get(steps)
        cells = [str(steps)]
        cells.append(f"{truth['output_tok_s']:.1f}" if truth else "")
        if guess:
            value, low, high = _estimate(guess, "output_tok_s")
            cells.append(f"{value:.1f} ({low:.1f} to {high:.1f})")
        else:
            cells.append("")
        if truth and guess:
            errors[steps] = guess["output_tok_s"][0] / truth["output_tok_s"] - 1
            cells.append(f"{errors[steps]:+.1%}")
        else:
            cells.append("")
        again = refit.get(steps)
        cells.append(f"{again['output_tok_s'][0]:.1f}" if again else "")
        if truth and again and steps not in r.planned:
            refit_errors[steps] = again["output_tok_s"][0] / truth["output_tok_s"] - 1
            cells.append(f"{refit_errors[steps]:+.1%}")
        else:
            cells.append("")
        cells.append(f"{truth['accept_length']:.2f}" if truth else "")
        cells.append(f"{guess['accept_length'][0]:.2f}" if guess else "")
        cells.append(f"{truth['cycle_ms']:.3f}" if truth else "")
        cells.append(f"{guess['cycle_ms'][0]:.3f}" if guess else "")
        cells.append(f"{again['cycle_ms'][0]:.3f}" if again else "")
        own = r.planned.get(steps)
        role = "profiled" if steps == plan_steps else "confirmed"
        cells.append(f"{own['output_tok_s']:.1f} tok/s, {role} (run #{own['run']})" if own else "")
        lines.append("| " + " | ".join(cells) + " |")
    best_sweep = max(r.swept.items(), key=lambda item: item[1]["output_tok_s"])
    best_steps = r.document["predicted_best"]["steps"]
    at_best = r.swept.get(best_steps) or r.planned.get(best_steps)
    shortfall = 1 - at_best["output_tok_s"] / best_sweep[1]["output_tok_s"] if at_best else None
    profile_s = r.document["runner_s"]["profile"]
    found = {
        "sweep_best": best_sweep[0],
        "sweep_best_tok_s": best_sweep[1]["output_tok_s"],
        "predicted_best": best_steps,
        "shortfall": shortfall,
        "worst_error": max(errors.values(), key=abs) if errors else None,
        "worst_steps": max(errors, key=lambda k: abs(errors[k])) if errors else None,
        "worst_refit_error": max(refit_errors.values(), key=abs) if refit_errors else None,
        "refit_best": plan.get("refit_best"),
        "sweep_s": r.sweep.wall_s,
        "plan_s": r.plan.wall_s,
        "profile_s": profile_s,
        "confirm_s": r.document["runner_s"]["confirm"],
    }
    sweep_plain_s, plan_reused = plain_twins(r)
    # Like for like: a plan that reused the plain twin against a sweep that did not reuse it
    # is set against the sweep less its plain twin, as a sweep that reused it would run.
    like_sweep_s = r.sweep.wall_s - sweep_plain_s if plan_reused else r.sweep.wall_s
    found |= {"plan_reused_plain": plan_reused, "like_sweep_s": like_sweep_s}
    like = (
        f" With the plain twin reused from the history on both sides (the sweep less its "
        f"{sweep_plain_s:.0f} s plain twin: {like_sweep_s:.0f} s), the plan costs "
        f"{r.plan.wall_s / like_sweep_s:.0%} of it, its prediction alone "
        f"{profile_s / like_sweep_s:.0%}."
        if plan_reused
        else ""
    )
    lines += [
        "",
        f"The sweep's best: steps={best_sweep[0]}, {best_sweep[1]['output_tok_s']:.1f} tok/s. "
        f"The plan's predicted best: steps={best_steps}"
        + (
            f", measured {at_best['output_tok_s']:.1f} tok/s ({-shortfall:+.1%} against the "
            "sweep's best)."
            if at_best and shortfall is not None
            else ", not measured."
        ),
        "Confirmed: "
        + (
            "; ".join(
                f"steps={c['steps']} measured {c['measured']['output_tok_s']:.1f} tok/s, "
                f"predicted {c['predicted']['output_tok_s'][0]:.1f} "
                f"({c['error']['output_tok_s']:+.1%})"
                for c in r.document["confirmed"]
                if c.get("error")
            )
            or "none"
        )
        + ".",
        f"Runner time: the sweep {r.sweep.wall_s:.0f} s; the plan {r.plan.wall_s:.0f} s "
        f"({profile_s:.0f} s to profile, {found['confirm_s']:.0f} s to confirm, the rest the "
        "command's start and the model), "
        f"{r.plan.wall_s / r.sweep.wall_s:.0%} of the sweep's; its prediction alone "
        f"{profile_s / r.sweep.wall_s:.0%}"
        + (" (the plan's plain twin reused from the history)." if plan_reused else ".")
        + like,
    ]
    return lines, found


def pooled_section(rounds: list[Round]) -> tuple[list[str], dict[str, Any]]:
    """Per step count over every round: the median of the sweeps' tok/s against the median of
    the plans' predictions, first and refit (the refit's from the rounds whose plan did not
    measure that step count): each launch's own level is averaged out of both."""
    lines = [
        f"## Over the {len(rounds)} rounds: medians",
        "",
        "| steps | sweep tok/s | predicted tok/s | error | refit tok/s | error | shape error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    errors: dict[int, float] = {}
    refit_errors: dict[int, float] = {}
    shapes = shape_errors(rounds)
    for steps in sorted({k for r in rounds for k in r.swept}):
        swept = [r.swept[steps]["output_tok_s"] for r in rounds if steps in r.swept]
        guesses = [p["output_tok_s"][0] for r in rounds for p in _points(r, "predicted", steps)]
        refits = [
            p["output_tok_s"][0]
            for r in rounds
            if steps not in r.planned
            for p in _points(r, "refit", steps)
        ]
        truth = statistics.median(swept)
        cells = [str(steps), f"{truth:.1f}"]
        for values, found in ((guesses, errors), (refits, refit_errors)):
            if values:
                found[steps] = statistics.median(values) / truth - 1
                cells += [f"{statistics.median(values):.1f}", f"{found[steps]:+.1%}"]
            else:
                cells += ["", ""]
        cells.append(f"{shapes[steps]:+.1%}" if steps in shapes else "")
        lines.append("| " + " | ".join(cells) + " |")
    worst = max(map(abs, errors.values()), default=None)
    worst_refit = max(map(abs, refit_errors.values()), default=None)
    # The step count the plans named best most often (the smaller on a tie), on the medians.
    named = [r.document["predicted_best"]["steps"] for r in rounds]
    best = min(set(named), key=lambda k: (-named.count(k), k))
    medians = {
        k: statistics.median(r.swept[k]["output_tok_s"] for r in rounds if k in r.swept)
        for k in {k for r in rounds for k in r.swept}
    }
    top = max(medians, key=lambda k: medians[k])
    shortfall = 1 - medians[best] / medians[top] if best in medians else None
    lines += [
        "",
        "Shape error: the first prediction and the sweep each divided by its own tok/s at the "
        "profiled step count, then compared (the median over the rounds): what the model "
        "gets wrong once each launch's level is taken out of both sides.",
        "",
        f"The plans named steps={best} best in {named.count(best)} of {len(rounds)} rounds; "
        f"the sweeps' medians put steps={top} first ({medians[top]:.1f} tok/s)"
        + (f", steps={best} {shortfall:.1%} short of it." if shortfall is not None else "."),
    ]
    return lines, {
        "worst_error": worst,
        "worst_refit_error": worst_refit,
        "shortfall": shortfall,
    }


def shape_errors(rounds: list[Round]) -> dict[int, float]:
    """Per step count, the median over the rounds of (predicted at k / predicted at the
    profiled steps) / (swept at k / swept at the profiled steps) - 1: the prediction's shape
    against the sweep's, each launch's own level divided out."""
    found: dict[int, list[float]] = {}
    for r in rounds:
        (plan,) = r.document["plans"]
        predicted = {p["steps"]: p["output_tok_s"][0] for p in plan.get("predicted", [])}
        if not predicted:
            continue
        profiled = max(predicted)
        if profiled not in r.swept:
            continue
        anchor = predicted[profiled] / r.swept[profiled]["output_tok_s"]
        for steps, guess in predicted.items():
            if steps in r.swept and steps != profiled:
                found.setdefault(steps, []).append(
                    guess / r.swept[steps]["output_tok_s"] / anchor - 1
                )
    return {k: statistics.median(v) for k, v in found.items()}


def _points(r: Round, key: str, steps: int) -> list[dict[str, Any]]:
    (plan,) = r.document["plans"]
    return [p for p in plan.get(key, []) if p["steps"] == steps]


def goals(found: list[dict[str, Any]], pooled: dict[str, Any] | None = None) -> list[str]:
    """The goals over every round, each met or missed; where there are several rounds
    (`pooled`), the accuracy goals on their medians, each round's worst said beside."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    def judged(key: str) -> tuple[float | None, str]:
        """The figure a goal is judged on, and where it comes from."""
        rounds = [abs(f[key]) for f in found if f.get(key) is not None]
        one = max(rounds, default=None)
        if pooled is None or pooled.get(key) is None:
            return one, ""
        beside = f"; one round's {one:.1%}" if one is not None else ""
        return pooled[key], f" (medians over the rounds{beside})"

    rows = (
        ("shortfall", f"predicted best's measured tok/s within {GOAL_BEST:.0%} of the sweep's "
         "best", "short", GOAL_BEST),
        ("worst_error", f"every predicted tok/s within {GOAL_EACH:.0%} of the measured",
         "largest", GOAL_EACH),
        ("worst_refit_error", "the same after the refit on the confirmed steps' costs, at the "
         "step counts the plan did not measure", "largest", GOAL_EACH),
    )  # fmt: skip
    lines = ["| goal | found | |", "| --- | --- | --- |"]
    for key, goal, word, limit in rows:
        value, where = judged(key)
        if value is not None:
            found_text = f"{value:.1%} short" if word == "short" else f"largest {value:.1%}"
            lines.append(f"| {goal} | {found_text}{where} | {verdict(value <= limit)} |")
    # With the plain twin reused by the plan, cost is judged like for like (against the
    # sweep less its own plain twin); the plain ratio is said beside it.
    reused = all(f.get("plan_reused_plain") for f in found)
    key = "like_sweep_s" if reused else "sweep_s"
    cost = max(f["plan_s"] / f[key] for f in found)
    predict_cost = max(f["profile_s"] / f[key] for f in found)
    as_run = max(f["plan_s"] / f["sweep_s"] for f in found)
    how = (
        f"like for like: the plain twin reused from the history on both sides, the sweep "
        f"less its own; {as_run:.0%} against the whole sweep"
        if reused
        else "the plain twin measured by both"
    )
    lines.append(
        f"| plan's runner time at most {GOAL_COST:.0%} of the sweep's | {cost:.0%} (the whole "
        f"command, confirmations included; {how}); {predict_cost:.0%} for the prediction "
        f"alone | {verdict(cost <= GOAL_COST)} "
        f"(prediction alone: {verdict(predict_cost <= GOAL_COST)}) |"
    )
    return lines


def _without_note(argv: list[str]) -> list[str]:
    """The command's arguments as a reader would re-run them: the note (said apart) left out."""
    return without_flag(argv, "--note")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="embedded-default")
    parser.add_argument("--config", type=Path, default=REPO / "perfgate.toml")
    parser.add_argument("--sweep-steps", default="1-6", help="the full sweep's steps")
    parser.add_argument(
        "--plan-steps",
        type=int,
        help="the plan's profiled steps (default: the sweep's largest, so that the plan "
        "predicts every step count the sweep measures and profiles no longer chain than it)",
    )
    parser.add_argument("--confirm", type=int, default=2)
    parser.add_argument("--repeats", type=int, help="repeats per server (default: the scenario's)")
    parser.add_argument("--rounds", type=int, default=1, help="sweep and plan, alternated")
    parser.add_argument(
        "--plain-max-age-h",
        type=float,
        help="passed to both commands: each reuses a plain twin recorded within H hours (the "
        "first sweep measures it; the plan and later rounds reuse it), and the cost is judged "
        "like for like, against the sweep less its plain twin",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default="", help="a sentence on the machine's state")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/plan-cpu.md")
    parser.add_argument(
        "--work",
        type=Path,
        help="keep the history here and resume: a command that ended in an earlier call "
        "with this folder is not run again (default: a temporary folder, removed)",
    )
    parser.add_argument(
        "--only",
        choices=["sweep"],
        help="sweep: run the rounds' sweeps and stop, for a later call with the same --work "
        "to plan and write the record (where both do not fit one call)",
    )
    args = parser.parse_args()
    if args.only and args.work is None:
        parser.error("--only sweep needs --work DIR, where the next call finds the sweeps")
    if args.plan_steps is None:
        from perfgate.spec.sweep import parse_int_list

        args.plan_steps = max(parse_int_list(args.sweep_steps, "--sweep-steps"))
    raw = args.out.with_suffix("")
    raw.mkdir(parents=True, exist_ok=True)
    about = machine()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        db = f"sqlite:///{work.resolve()}/history.db"
        done = [one_round(i, args, db, raw) for i in range(1, args.rounds + 1)]
    rounds = [r for r in done if isinstance(r, Round)]
    failed = [c for c in done if isinstance(c, Command) and c.code not in (0, 1)]
    failed += [c for r in rounds for c in (r.sweep, r.plan) if c.code not in (0, 1)]
    if args.only == "sweep":
        if failed:
            print(f"{len(failed)} sweep(s) failed (above): nothing to plan against", flush=True)
            return 1
        print(f"swept; call again with --work {args.work} (without --only) to plan")
        return 0
    sections, found = [], []
    for r in rounds:
        if r.document.get("plans") and r.swept:
            lines, facts = round_section(r, args.plan_steps)
            sections += ["", *lines]
            found.append(facts)
    if not found:  # a record with nothing in it would only hide the one it replaces
        print(f"no round produced both a sweep and a plan: {args.out} left as it was")
        return 1
    complete = [r for r in rounds if r.document.get("plans") and r.swept]
    pooled_lines, pooled = pooled_section(complete) if len(complete) > 1 else ([], None)
    this = shlex.join(_without_note(sys.argv[1:]))
    reuse = f" --plain-max-age-h {args.plain_max_age_h:g}" if args.plain_max_age_h else ""
    text = "\n".join(
        [
            f"# perfgate plan against the full sweep: {args.scenario}",
            "",
            *about,
            f"- load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
            f"{time.monotonic() - started:.0f} s in all",
            *([f"- {args.note}"] if args.note else []),
            "",
            f"Command: `python benchmarks/plan_accuracy.py {this}`. Per round: "
            f"`perfgate sweep --steps {args.sweep_steps} --no-early-stop{reuse}`, then "
            f"`perfgate plan --steps {args.plan_steps} --confirm {args.confirm}{reuse}` "
            f"(scenario {args.scenario}); "
            "their tables, JSON and logs are in "
            f"`{raw.name}/`. Measured figures: median tok/s and accept length over the "
            "repeats, each phase's mean ms per cycle (the plan predicts means). Error: "
            "predicted over measured, less one. Refit: the plan's prediction made again with "
            "its confirmed step counts' phase costs (perfgate/plan/forecast.py), its error "
            "shown at the step counts the plan did not measure.",
            "",
            "Timings on a shared machine move with its load (the load averages above say "
            "how busy this one was), and a prediction from one launch carries that launch's "
            "level into every step count. The sweep's figures are one launch each too: where "
            "one point measured twice (the sweep's row and the plan's confirmation, the last "
            "column) differs by more than a goal's margin, that goal cannot be shown at this "
            "noise, whatever the model.",
            "",
            "## Goals",
            "",
            *goals(found, pooled),
            *(["", *pooled_lines] if pooled_lines else []),
            "",
            "## Rounds",
            *sections,
            *(
                ["", "Failed: " + "; ".join(shlex.join(c.argv[2:]) for c in failed)]
                if failed
                else []
            ),
            "",
        ]
    )
    names = {**default_names(), str(raw): raw.name}
    args.out.write_text(portable(text, names))
    for file in raw.iterdir():
        file.write_text(portable(file.read_text(), {**names, tempfile.gettempdir(): "TMP"}))
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
