"""A stand-in `nvidia-smi` for machines without GPUs: answers queries from a JSON file.

    nvidia-smi --query-gpu=F1,F2 --format=csv,noheader,nounits   -> one row per GPU
    nvidia-smi --query-compute-apps=F1,F2 --format=...           -> one row per process
    nvidia-smi                                                    -> a header with the CUDA version

The JSON file (``$FAKE_NVIDIA_SMI``) holds ``{"gpus": [{field: value}], "apps": [{field:
value}], "rejected": [field], "cuda": "12.8", "broken": false}``; a field a GPU lacks prints
``[N/A]``, a rejected field fails the whole query as an old driver does, and a broken driver
fails every call. `install` also sets ``PERFGATE_GPU_READER=nvidia-smi``, so that perfgate
reads the stand-in even where NVML would find a real GPU.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()

IDLE_H200: dict[str, str] = {
    "name": "NVIDIA H200",
    "driver_version": "580.159.04",
    "memory.used": "1",
    "memory.total": "143771",
    "utilization.gpu": "0",
    "clocks_event_reasons.active": "0x0000000000000001",
    "ecc.errors.uncorrected.volatile.total": "0",
    "retired_pages.pending": "No",
    "remapped_rows.pending": "0",
    "remapped_rows.failure": "0",
    "clocks.sm": "345",
    "clocks.max.sm": "1980",
    "clocks.applications.graphics": "1785",
    "power.limit": "700.00",
    "persistence_mode": "Enabled",
    "temperature.gpu": "31",
}


def gpus(count: int = 8, **changes: Mapping[str, str]) -> list[dict[str, str]]:
    """`count` idle H200s; `changes={"3": {"memory.used": "40000"}}` alters GPU 3."""
    rows = []
    for index in range(count):
        row = {**IDLE_H200, "index": str(index), "uuid": f"GPU-{index:08d}-fake"}
        row.update(changes.get(str(index), {}))
        rows.append(row)
    return rows


def install(
    folder: Path,
    gpu_rows: Sequence[Mapping[str, str]],
    apps: Sequence[Mapping[str, str]] = (),
    rejected: Sequence[str] = (),
) -> dict[str, str]:
    """Write the stand-in into `folder` and return the variables that put it first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "nvidia-smi.json"
    update(state, gpu_rows, apps, rejected)
    script = folder / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "FAKE_NVIDIA_SMI": str(state),
        "PERFGATE_GPU_READER": "nvidia-smi",
    }


def update(
    state: Path,
    gpu_rows: Sequence[Mapping[str, str]],
    apps: Sequence[Mapping[str, str]] = (),
    rejected: Sequence[str] = (),
    broken: bool = False,
) -> None:
    """What the stand-in shows from now on; written whole, as another thread may be reading."""
    document = {"gpus": list(gpu_rows), "apps": list(apps), "rejected": list(rejected)}
    partial = state.with_suffix(".partial")
    partial.write_text(json.dumps({**document, "broken": broken}))
    os.replace(partial, state)


def calls_log(state: Path) -> Path:
    """Where the stand-in writes the arguments of each call, one line per call."""
    return state.with_suffix(".calls")


def _rows(fields: list[str], records: list[dict[str, Any]]) -> str:
    return "".join(", ".join(str(r.get(f, "[N/A]")) for f in fields) + "\n" for r in records)


def main(argv: list[str]) -> int:
    path = Path(os.environ["FAKE_NVIDIA_SMI"])
    with calls_log(path).open("a") as log:  # one line per call, for the tests that count them
        log.write(" ".join(argv) + "\n")
    state = json.loads(path.read_text())
    if state.get("broken"):
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
            file=sys.stderr,
        )
        return 9
    query = next((a for a in argv if a.startswith("--query-")), None)
    if query is None:
        print(
            f"| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: {state.get('cuda', '12.8')} |"
        )
        return 0
    kind, _, listed = query.partition("=")
    fields = listed.split(",")
    for name in fields:
        if name in state["rejected"]:
            print(f'Field "{name}" is not a valid field to query.', file=sys.stdout)
            return 2
    records = state["gpus"] if kind == "--query-gpu" else state["apps"]
    sys.stdout.write(_rows(fields, records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
