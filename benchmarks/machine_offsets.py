"""How far each machine of a history sits from the runs a baseline approved, and verify paired
with the same run's plain decode step. Read from a recorded history.

    python benchmarks/machine_offsets.py HISTORY.db --reference 1-10 [--host A=1-20 ...] \\
        [--out FILE.md]

Per run, from its samples (what the gate judges: a phase's sample is a repeat's median ms per
cycle): the median over its repeats of the speculative and the plain server's output_tok_s,
of the speculative server's verify_ms, draft_ms, draft_extend_ms and cycle_ms, and of verify
over the plain server's cycle_ms in the same repeat (the target's one-token forward on the
same GPU, minutes apart): each as its change against the mean over
the ``--reference`` runs (those a baseline approved). A machine is the fingerprint's
``machine`` where the run names one, else the label ``--host LABEL=RUNS`` gives it (for runs
recorded before perfgate named machines), else "?". Two tables: every run, its machine and
injected slowdown (the fingerprint's ``injected_slowdown``); and per machine and slowdown,
the range over its runs of each change. Where a machine is a few tenths of a percent faster
or slower in every GPU phase, verify moves with it and verify_steps does not. Where the
history has them, the servers' time to first token (ttft_ms) too: the host's side of a
request, where a machine can sit apart with its GPU's work the same.

Writes the tables (markdown) to stdout, and to ``--out`` where given. Exit 0; 64 on a file
that is not a perfgate history, or on runs named that it does not hold.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path

from recorded_history import connect, emit, missing

COLUMNS = {"runs": "id, fingerprint", "samples": "run_id, mode, metric, repeat, value"}
# (column, server, metric)
FIGURES = (
    ("spec tok/s", "spec", "output_tok_s"),
    ("plain tok/s", "plain", "output_tok_s"),
    ("verify", "spec", "verify_ms"),
    ("draft", "spec", "draft_ms"),
    ("draft_extend", "spec", "draft_extend_ms"),
    ("cycle", "spec", "cycle_ms"),
)
PAIRED = "verify_steps"  # perfgate.metrics: verify over the plain step, per repeat
# The host's side of a request, where a history has it (a machine can sit apart there alone:
# h200-gate-proof.md, 2026-12-06, sixth lease): shown where every reference run has it.
HOST_SIDE = (("spec ttft", "spec", "ttft_ms"), ("plain ttft", "plain", "ttft_ms"))


def run_ids(text: str) -> list[int]:
    """`1-10,14,17` as run ids."""
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return ids


def figures(connection: sqlite3.Connection, run: int) -> dict[str, float] | None:
    """The run's medians over its repeats, and verify over the plain step repeat by repeat;
    None where it lacks one of them (a failed run)."""

    def values(mode: str, metric: str) -> dict[int, float]:
        query = "SELECT repeat, value FROM samples WHERE run_id = ? AND mode = ? AND metric = ?"
        return dict(connection.execute(query, (run, mode, metric)))

    found: dict[str, float] = {}
    for column, mode, metric in FIGURES:
        measured = values(mode, metric)
        if not measured:
            return None
        found[column] = statistics.median(measured.values())
    steps = values("plain", "cycle_ms")
    paired = [v / steps[r] for r, v in values("spec", "verify_ms").items() if steps.get(r)]
    if not paired:
        return None
    found[PAIRED] = statistics.median(paired)
    for column, mode, metric in HOST_SIDE:
        if measured := values(mode, metric):
            found[column] = statistics.median(measured.values())
    return found


def tables(db: Path, reference: list[int], hosts: dict[int, str]) -> str:
    with connect(db) as connection:
        rows = connection.execute("SELECT id, fingerprint FROM runs ORDER BY id").fetchall()
        runs = {}
        for run, fingerprint in rows:
            facts = figures(connection, run)
            if facts is not None:
                runs[run] = (json.loads(fingerprint), facts)
    absent = [r for r in reference if r not in runs]
    if absent:
        raise LookupError(f"{db}: no complete run {', '.join(map(str, absent))} to refer to")
    columns = [c for c, *_ in FIGURES] + [PAIRED]
    columns += [c for c, *_ in HOST_SIDE if all(c in runs[r][1] for r in reference)]
    centre = {c: statistics.fmean(runs[r][1][c] for r in reference) for c in columns}
    changes: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = {}
    lines = [
        f"Against the mean of runs {', '.join(map(str, reference))} (`{db}`):",
        "",
        "| run | machine | injected | " + " | ".join(columns) + " |",
        "| ---: | --- | --- |" + " ---: |" * len(columns),
    ]
    for run, (fingerprint, facts) in runs.items():
        machine = fingerprint.get("machine") or hosts.get(run, "?")
        injected = fingerprint.get("injected_slowdown") or "none"
        change = {c: facts[c] / centre[c] - 1 for c in columns if c in facts}
        changes.setdefault((machine, injected), []).append((run, change))
        cells = " | ".join(f"{change[c]:+.2%}" if c in change else "-" for c in columns)
        lines.append(f"| {run} | {machine} | {injected} | {cells} |")
    lines += [
        "",
        "Per machine and slowdown, the range over its runs:",
        "",
        "| machine | injected | runs | " + " | ".join(columns) + " |",
        "| --- | --- | ---: |" + " ---: |" * len(columns),
    ]
    for (machine, injected), group in changes.items():
        ranges = []
        for c in columns:
            seen = [ch[c] for _, ch in group if c in ch]
            low, high = min(seen, default=None), max(seen, default=None)
            if low is None or high is None:  # no run of the group has it
                ranges.append("-")
            elif low == high:
                ranges.append(f"{low:+.2%}")
            else:
                ranges.append(f"{low:+.2%}..{high:+.2%}")
        lines.append(f"| {machine} | {injected} | {len(group)} | {' | '.join(ranges)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("--reference", required=True, help="the approved runs: 1-10,14")
    parser.add_argument("--host", action="append", default=[], help="LABEL=RUNS, e.g. A=1-20")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    why = missing(args.history, COLUMNS)
    if why:
        print(why, file=sys.stderr)
        return 64
    try:
        hosts: dict[int, str] = {}
        for given in args.host:
            label, _, runs = given.partition("=")
            hosts |= dict.fromkeys(run_ids(runs), label)
        reference = run_ids(args.reference)
        text = tables(args.history, reference, hosts)
    except ValueError:
        print("--reference and --host take run ids such as 1-10,14 (LABEL=1-10)", file=sys.stderr)
        return 64
    except LookupError as error:
        print(f"{error} (--reference)", file=sys.stderr)
        return 64
    return emit(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
