"""Read the probe's files on the client side, once they are complete up to a moment."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.errors import InfrastructureError


@dataclass(frozen=True)
class CycleRecord:
    """One decode cycle (or one prefill) as timed inside the server."""

    kind: str  # "cycle" or "prefill"
    pid: int
    seq: int
    started_at: float  # wall clock, seconds since the epoch
    ms: dict[str, float]  # phase -> milliseconds spent in it during this cycle
    every: int = 1  # the probe timed one cycle in this many: this record stands for `every`
    rank: int = 0  # the process's tensor-parallel rank (torch.distributed's), 0 without TP
    # Per sequence of the batch: the draft tokens it accepted this cycle (the bonus token
    # excluded), and which sequence it is (a batch row or request slot, stable while it
    # decodes); empty where the engine's table does not say (perfgate.probe.targets).
    accepted: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()


def _probe_files(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob("probe-*.jsonl"))


def _process_alive(path: Path) -> bool:
    # probe-<pid>.jsonl: the file of a process that has ended is as complete as it will be.
    try:
        os.kill(int(path.stem.removeprefix("probe-")), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True
    return True


def _complete_after(path: Path, moment: float) -> bool:
    """True when `path` ends with a heartbeat taken after `moment` with nothing pending, or
    its process has ended."""
    if not _process_alive(path):
        return True
    with path.open("rb") as handle:
        handle.seek(0, 2)
        handle.seek(max(0, handle.tell() - 4096))
        tail = handle.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(tail):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if item.get("kind") == "flushed":
            return bool(item["t"] >= moment and item["pending"] == 0)
    return False


def wait_until_complete(out_dir: Path, moment: float, timeout_s: float = 30.0) -> None:
    """Wait until every probe file holds all cycles that started before `moment`."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = _probe_files(out_dir)
        if files and all(_complete_after(p, moment) for p in files):
            return
        if time.monotonic() > deadline:
            raise InfrastructureError(
                f"the probe's files in {out_dir} did not catch up within {timeout_s:.0f} s "
                f"({len(files)} file(s)); is the server still alive and the probe active? "
                "A line 'perfgate probe: not active' in the server log says why not"
            )
        time.sleep(0.02)


def read_records(out_dir: Path) -> list[CycleRecord]:
    """Return every cycle and prefill record of every process, in start order."""
    records = []
    for path in _probe_files(out_dir):
        for line in path.read_text("utf-8").splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            if item.get("kind") in ("cycle", "prefill"):
                records.append(
                    CycleRecord(
                        item["kind"],
                        item["pid"],
                        item["seq"],
                        item["t"],
                        item["ms"],
                        int(item.get("every", 1)),
                        int(item.get("rank", 0)),
                        tuple(int(n) for n in item.get("accepted", ())),
                        tuple(int(n) for n in item.get("rows", ())),
                    )
                )
    return sorted(records, key=lambda r: (r.started_at, r.pid, r.seq))


def phase_totals_by_pid(
    records: Sequence[CycleRecord], start: float, end: float
) -> dict[int, dict[str, float]]:
    """Milliseconds per phase summed over the cycles of each process that began in [start, end]:
    a record of a cycle timed one in `every` counts `every` times, standing for the untimed."""
    totals: dict[int, dict[str, float]] = {}
    for record in records:
        if record.kind == "cycle" and start <= record.started_at <= end:
            per_phase = totals.setdefault(record.pid, {})
            for phase, ms in record.ms.items():
                per_phase[phase] = per_phase.get(phase, 0.0) + ms * record.every
    return totals


def rank_cycle_ms(records: Sequence[CycleRecord], start: float, end: float) -> dict[str, float]:
    """The per-rank spread of cycle time over the cycles that began in [start, end].

    ``rank_cycle_ms.<rank>`` is each rank's median cycle in milliseconds and
    ``rank_cycle_ms.spread`` the slowest median less the fastest: a rank that lags shows
    there. Empty unless two ranks or more were timed.
    """
    cycles: dict[int, list[float]] = {}
    for record in records:
        in_window = start <= record.started_at <= end
        if record.kind == "cycle" and in_window and "cycle" in record.ms:
            cycles.setdefault(record.rank, []).append(record.ms["cycle"])
    if len(cycles) < 2:
        return {}
    medians = {rank: statistics.median(values) for rank, values in sorted(cycles.items())}
    summary = {f"rank_cycle_ms.{rank}": ms for rank, ms in medians.items()}
    summary["rank_cycle_ms.spread"] = max(medians.values()) - min(medians.values())
    return summary
