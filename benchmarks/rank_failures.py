"""A rank of a tensor-parallel server dies mid-run: does `perfgate run` end fast, say which
rank and leave nothing behind? Measured over many runs.

    python benchmarks/rank_failures.py --out DIR                        # CPU, gloo: TP2 and TP4
    python benchmarks/rank_failures.py --out DIR --rounds 1 --cases tp2-repeat-kill
    python benchmarks/rank_failures.py --out DIR --device cuda --tps 1 \\
        --cases tp1-repeat-sigkill --model perfgate/llama-large --extra-arg=--load-format \\
        --extra-arg=dummy --max-new-tokens 256                          # one GPU: see below

Each case is one `perfgate run --no-gate` of a scenario of its own (the tiny models by
default, one torch thread), whose plain server (measured after the speculative one) loses a rank;
``--server spec`` has the speculative server lose it instead, the run's first server, so that no
plain server starts (the tests' choice: half the launches):

- WHEN: ``warmup`` (during perfgate's warm-up request), ``repeat`` (during repeat 2 of 3) or
  ``between`` (once repeat 1 is done, before repeat 2 reaches the rank);
- HOW: ``kill`` (the rank SIGKILLs itself at that point) or ``exit`` (it exits with code 134,
  as a crash such as an illegal memory access does), both through the embedded engine's
  ``--debug-rank-exit``; or ``sigkill``, a SIGKILL sent from here to the rank's process once
  perfgate's output shows the repeat (``repeat`` only), the way a user or the out-of-memory
  killer sends it; ``sigkill0`` sends it to rank 0, the server process itself (at ``--tps 1``
  that is what ``sigkill`` kills).

The rank killed is the last one (rank TP-1), but rank 0 for ``sigkill0`` and at TP1. Per
case it records the seconds from the rank's death (its pid gone, polled every 10 ms) to
perfgate's exit, perfgate's exit code, whether its output names the rank, its exit status
and its last line, and what was left at the moment perfgate exited: any process in a
process group seen during the run (perfgate's own and each server's) or carrying the run's
own environment tag (``PERFGATE_SOAK_TAG``, which every process perfgate starts inherits).
On a GPU (``--device cuda``, read through perfgate.devices), each GPU's memory in use before
the launch, at its peak, at perfgate's exit, and how long after the death it was back within
64 MiB of before.

The embedded engine puts rank r on cuda:r, so a TP2 case needs two GPUs; on a machine of one
GPU the check is ``--tps 1 --cases tp1-repeat-sigkill``: the server process killed during a
repeat, its memory released (large model, seeded weights: ``--load-format dummy``).

Writes results.json and results.md; exit code 0 when every case ended with exit 69 within
--limit-s (10) of the death, named the rank and left nothing, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfgate.devices import read_gpus
from perfgate.engines.gpu_memory import RELEASE_SLACK_MIB
from perfgate.engines.processes import ProcessInfo, iter_processes, read_process, send
from perfgate.sglang.facts import all_names
from perfgate.spec.scenario import SPECULATIVE_FLAGS

REPO = Path(__file__).resolve().parents[1]
WHENS = ("warmup", "repeat", "between")
HOWS = ("kill", "exit", "sigkill", "sigkill0")
FROM_HERE = ("sigkill", "sigkill0")
EXIT_CODE = 134  # what a process that aborts (SIGABRT) reports through a shell
TAG = "PERFGATE_SOAK_TAG"
RANK_MODULE = "perfgate.engines.embedded.rank"
SERVER_MODULE = "perfgate.engines.embedded.server"
# The speculative server's own flags, every name each has had: on its command lines only.
SPECULATIVE_NAMES = frozenset(name for _, role in SPECULATIVE_FLAGS for name in all_names(role))
# Batches of a server, as the embedded engine counts them (--debug-rank-exit): 1 is its own
# warm-up, 2 perfgate's warm-up request, 3 and 4 repeats 1 and 2.
FAULTS = {"warmup": "2:in", "repeat": "4:in", "between": "3:after"}
POLL_S = 0.01  # for the rank's death
SCAN_S = 0.2  # for the run's processes
MEMORY_BACK_MIB = 64.0


@dataclass(frozen=True)
class Case:
    tp: int
    when: str
    how: str

    @property
    def name(self) -> str:
        return f"tp{self.tp}-{self.when}-{self.how}"

    @property
    def rank(self) -> int:
        return 0 if self.how == "sigkill0" else self.tp - 1


@dataclass
class Outcome:
    case: str
    round: int
    tag: str = ""  # PERFGATE_SOAK_TAG of the run
    exit_code: int | None = None
    death_to_exit_s: float | None = None
    rank_pid: int | None = None
    named: bool = False  # the output names the rank, its exit status and its last line
    left: list[str] = field(default_factory=list)
    gpu_mib: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def ok(self, limit_s: float) -> bool:
        return (
            self.exit_code == 69
            and self.death_to_exit_s is not None
            and self.death_to_exit_s <= limit_s
            and self.named
            and not self.left
            and self.gpu_released
        )

    @property
    def gpu_released(self) -> bool:
        """At perfgate's exit every GPU was back within what perfgate waits for (the slack of
        perfgate.engines.gpu_memory) of its memory before the launch; true without GPUs."""
        if not self.gpu_mib:
            return True
        before, at_exit = self.gpu_mib["before"], self.gpu_mib["at_exit"]
        return all(at_exit.get(k, 0.0) <= v + RELEASE_SLACK_MIB for k, v in before.items())


def parse_case(text: str) -> Case:
    tp, when, how = text.split("-")
    case = Case(int(tp.removeprefix("tp")), when, how)
    if case.when not in WHENS or case.how not in HOWS or case.tp < 1:
        raise SystemExit(f"unknown case {text!r}: tpN-{'|'.join(WHENS)}-{'|'.join(HOWS)}")
    if case.how in FROM_HERE and case.when != "repeat":
        raise SystemExit(f"{text}: a SIGKILL from outside is timed by the repeat's line only")
    if case.tp == 1 and case.how not in FROM_HERE:
        raise SystemExit(f"{text}: at tp 1 the server process itself is killed (sigkill)")
    return case


def config_text(case: Case, args: argparse.Namespace) -> str:
    extra = ["--num-threads", "1", *args.extra_arg] if args.device == "cpu" else args.extra_arg
    fault = []
    if case.how not in FROM_HERE:
        point, where = FAULTS[case.when].split(":")
        how = "kill" if case.how == "kill" else str(EXIT_CODE)
        fault = ["--debug-rank-exit", f"{case.rank}:{point}:{where}:{how}"]
    spec, plain = (fault, []) if args.server == "spec" else ([], fault)
    tokens = args.sigkill_max_new_tokens if case.how in FROM_HERE else args.max_new_tokens
    return textwrap.dedent(
        f"""
        [perfgate]
        default_scenarios = ["soak"]
        baselines = "baselines"
        history = "sqlite:///history.db"

        [scenarios.soak]
        engine = "embedded"
        model = {json.dumps(args.model)}
        draft = {json.dumps(args.draft)}
        steps = 3
        topk = 1
        draft_tokens = 4
        tp = {case.tp}
        device = {json.dumps(args.device)}
        prompts = ["Return the number of items", "Create a new instance of"]
        max_new_tokens = {tokens}
        repeats = 3
        warmup = 1
        startup_timeout_s = 300
        extra_args = {json.dumps(extra)}
        spec_extra_args = {json.dumps(spec)}
        plain_extra_args = {json.dumps(plain)}
        """
    )


def _rank_process(case: Case, server: str, tagged: list[ProcessInfo]) -> ProcessInfo | None:
    """The process of the case's rank in the `server` ("plain" or "spec") once that server
    started it. The speculative server's processes (measured first, each rank given the
    server's flags) are told apart by the speculative flags on their command lines
    (perfgate.spec.scenario)."""
    for process in tagged:
        if "supervise.py" in process.cmdline:  # the supervisor's command line holds the server's
            continue
        words = process.cmdline.split()
        speculative = bool(SPECULATIVE_NAMES & {word.split("=", 1)[0] for word in words})
        if speculative != (server == "spec"):
            continue
        if case.rank == 0 and SERVER_MODULE in words:
            return process
        if RANK_MODULE in words and words[words.index(RANK_MODULE) + 1] == str(case.rank):
            return process
    return None


def _gpu_used() -> dict[str, float]:
    report = read_gpus(apps=False)
    return {} if report is None else {str(g.index): g.memory_used_mib for g in report.gpus}


def run_case(case: Case, round_: int, args: argparse.Namespace, work: Path) -> Outcome:
    tag = uuid.uuid4().hex
    outcome = Outcome(case.name, round_, tag)
    folder = work / f"{case.name}-{round_}"
    folder.mkdir(parents=True)
    (folder / "perfgate.toml").write_text(config_text(case, args))
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGATE_DB_URL", "CI")}
    env |= {
        TAG: tag,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    }
    before = _gpu_used() if args.device == "cuda" else {}
    output = folder / "output.txt"
    with output.open("wb") as out:
        perfgate = subprocess.Popen(
            [sys.executable, "-m", "perfgate", "run", "--no-gate"],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    groups = {perfgate.pid}
    peak = dict(before)
    rank: ProcessInfo | None = None
    died_at: float | None = None
    scanned = 0.0
    deadline = time.monotonic() + args.timeout_s
    try:
        while perfgate.poll() is None and time.monotonic() < deadline:
            if time.monotonic() - scanned > SCAN_S:  # /proc's environments: not every poll
                scanned = time.monotonic()
                tagged = [p for p in iter_processes() if (p.environ or {}).get(TAG) == tag]
                groups |= {p.pgrp for p in tagged if p.pgrp}
                if rank is None:
                    rank = _rank_process(case, args.server, tagged)
                    outcome.rank_pid = rank.pid if rank else None
                if before:
                    peak = {k: max(v, peak.get(k, 0.0)) for k, v in _gpu_used().items()}
            if rank is not None and died_at is None:
                shown = output.read_text(errors="replace")
                if case.how in FROM_HERE and f"soak {args.server}: repeat 2 of" in shown:
                    send(rank, signal.SIGKILL)  # while its pid still names it
                now = read_process(rank.pid)
                if now is None or not now.alive or now.started != rank.started:
                    died_at = time.monotonic()
            time.sleep(POLL_S)
        code = perfgate.poll()
        ended_at = time.monotonic()
        outcome.left = _left(tag, groups)
        outcome.exit_code = code
        if died_at is not None and code is not None:
            outcome.death_to_exit_s = round(ended_at - died_at, 3)
        if code is None:
            outcome.note = f"perfgate still ran after {args.timeout_s:.0f} s"
    finally:
        if perfgate.poll() is None:
            os.killpg(perfgate.pid, signal.SIGKILL)
            perfgate.wait()
        for pid in [int(p.split()[1]) for p in outcome.left]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    text = output.read_text(errors="replace")
    outcome.named = _names_the_rank(case, outcome.rank_pid, text)
    if before:
        outcome.gpu_mib = _memory(before, peak, died_at)
    return outcome


def _left(tag: str, groups: set[int]) -> list[str]:
    """What still runs of the case: in a process group seen during it, or carrying its tag."""
    found = []
    for process in iter_processes():
        if process.pid == os.getpid() or not process.alive:
            continue
        if (process.environ or {}).get(TAG) == tag or process.pgrp in groups:
            found.append(f"pid {process.pid} ({process.state}): {process.cmdline[:100]}")
    return found


def _names_the_rank(case: Case, pid: int | None, text: str) -> bool:
    status = {
        "kill": "was killed by SIGKILL (signal 9)",
        "sigkill": "was killed by SIGKILL (signal 9)",
        "sigkill0": "was killed by SIGKILL (signal 9)",
        "exit": f"exited with code {EXIT_CODE}",
    }[case.how]
    if case.rank == 0:
        who = (
            f"the server (rank 0 of {case.tp}, pid {pid})"
            if case.tp > 1
            else f"the server (pid {pid})"
        )
        return f"{who} {status}" in text and "perfgate exit code: 69" in text
    said = f"rank {case.rank} of {case.tp} (pid {pid}) {status} after start-up" in text
    last = case.how in FROM_HERE or f"[rank {case.rank}] ending rank {case.rank} " in text
    return said and last and "perfgate exit code: 69" in text


def _memory(
    before: dict[str, float], peak: dict[str, float], died_at: float | None
) -> dict[str, Any]:
    at_exit = _gpu_used()
    back_s = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = _gpu_used()
        if all(now.get(k, 0.0) <= v + MEMORY_BACK_MIB for k, v in before.items()):
            back_s = round(time.monotonic() - died_at, 3) if died_at is not None else None
            break
        time.sleep(0.05)
    return {"before": before, "peak": peak, "at_exit": at_exit, "back_after_death_s": back_s}


def render(results: dict[str, Any]) -> str:
    rows = results["outcomes"]
    lines = [
        "# A rank that dies mid-run",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {results['machine']}; Python {results['python']}; torch {results['torch']}; "
        f"perfgate from the source tree ({results['commit']}).",
        "",
        "| case | runs | exit 69 | named | left | death to exit, s (min / median / max) |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == name]
        times = sorted(r["death_to_exit_s"] for r in mine if r["death_to_exit_s"] is not None)
        spread = (
            f"{times[0]:.2f} / {statistics.median(times):.2f} / {times[-1]:.2f}" if times else "-"
        )
        lines.append(
            f"| {name} | {len(mine)} | {sum(r['exit_code'] == 69 for r in mine)} "
            f"| {sum(r['named'] for r in mine)} | {sum(len(r['left']) for r in mine)} | {spread} |"
        )
    failed = [r for r in rows if not r["ok"]]
    lines += [
        "",
        f"{len(rows)} runs, {len(failed)} not as required (exit 69 within "
        f"{results['limit_s']:g} s of the death, the rank named, nothing left, and on a GPU "
        f"its memory back within {RELEASE_SLACK_MIB:g} MiB at perfgate's exit).",
    ]
    for row in failed:
        lines.append(f"- {row['case']} round {row['round']}: {json.dumps(row)}")
    gpu = [r for r in rows if r["gpu_mib"]]
    if gpu:
        lines += [
            "",
            "| case | round | GPU MiB before | peak | at perfgate's exit | back within "
            f"{MEMORY_BACK_MIB:g} MiB, s after the death |",
            "| --- | ---: | --- | --- | --- | ---: |",
        ]
        for r in gpu:
            m = r["gpu_mib"]
            lines.append(
                f"| {r['case']} | {r['round']} | {m['before']} | {m['peak']} | {m['at_exit']} "
                f"| {m['back_after_death_s']} |"
            )
    return "\n".join(lines) + "\n"


def _machine(device: str) -> str:
    from perfgate.engines.embedded.engine import device_name

    cpu = f"{device_name(__import__('torch').device('cpu'))}, {os.cpu_count()} CPUs"
    report = read_gpus(apps=False) if device == "cuda" else None
    if report is None or not report.gpus:
        return cpu
    gpus = report.gpus
    return f"{len(gpus)} x {gpus[0].name} (driver {gpus[0].driver}), {cpu}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tps", default="2,4", help="tensor-parallel sizes (default 2,4)")
    parser.add_argument("--cases", default="", help="comma-separated tpN-WHEN-HOW (default: all)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each case")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--model", default="perfgate/llama-tiny")
    parser.add_argument("--draft", default="perfgate/eagle3-llama-tiny")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument(
        "--sigkill-max-new-tokens",
        type=int,
        default=48,
        help="for the SIGKILL sent from here: a repeat long enough to be inside (default 48)",
    )
    parser.add_argument(
        "--extra-arg", action="append", default=[], help="a server flag, both servers"
    )
    parser.add_argument(
        "--server",
        default="plain",
        choices=("plain", "spec"),
        help="the server that loses a rank: the plain twin (default), measured after the "
        "speculative server, or the speculative server, the run's first",
    )
    parser.add_argument("--limit-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per run, before giving up")
    args = parser.parse_args(argv)
    if args.cases:
        cases = [parse_case(c) for c in args.cases.split(",")]
    else:
        tps = [int(t) for t in args.tps.split(",")]
        cases = [Case(tp, when, how) for tp in tps for when in WHENS for how in ("kill", "exit")]
        cases += [Case(tp, "repeat", how) for tp in tps for how in FROM_HERE]
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="rank-failures-") as work:
        for round_ in range(1, args.rounds + 1):
            for case in cases:
                outcome = run_case(case, round_, args, Path(work))
                outcomes.append(outcome)
                print(
                    f"{case.name} #{round_}: exit {outcome.exit_code}, "
                    f"{outcome.death_to_exit_s} s, named {outcome.named}, left {outcome.left}",
                    flush=True,
                )
                if not outcome.ok(args.limit_s):  # keep what shows why
                    keep = args.out / "failed" / f"{case.name}-{round_}"
                    keep.mkdir(parents=True, exist_ok=True)
                    source = Path(work) / f"{case.name}-{round_}" / "output.txt"
                    (keep / "output.txt").write_bytes(source.read_bytes())
    import torch

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    results = {
        "command": "python benchmarks/rank_failures.py "
        + " ".join(sys.argv[1:] if argv is None else argv).replace(str(args.out), "OUT"),
        "machine": _machine(args.device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "commit": commit,
        "limit_s": args.limit_s,
        "outcomes": [
            {**asdict(o), "gpu_released": o.gpu_released, "ok": o.ok(args.limit_s)}
            for o in outcomes
        ],
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = render(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0 if all(o.ok(args.limit_s) for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
