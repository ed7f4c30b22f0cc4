"""SGLang's own ``sglang.benchmark.serving`` against a running server, as a cross-check.

It runs in an interpreter that has SGLang (the serving table's ``cross_check_python``, else
the scenario's ``python``), offline (``HF_HUB_OFFLINE`` and friends: it loads the tokenizer
that ``/model_info`` names, from a local folder for the embedded engine), with streaming on
and its own ready check, on the same prompts (its ``custom`` dataset: a JSONL of
conversations) at the same rate and concurrency, each request ``output_len`` tokens. Its
figures come from its ``--output-file`` (SGLang 0.5.23's keys) and are recorded as
``sglang_*`` metrics beside perfgate's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import InfrastructureError
from perfgate.serving.load import LoadRequest, ServingLoad

MODULE = "sglang.benchmark.serving"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# perfgate's metric name for each key of the output file (0.5.23's benchmark/serving.py).
FIGURES = {
    "sglang_output_tok_s": "output_throughput",
    "sglang_ttft_ms_p50": "median_ttft_ms",
    "sglang_ttft_ms_p99": "p99_ttft_ms",
    "sglang_itl_ms_p50": "median_itl_ms",
    "sglang_itl_ms_p99": "p99_itl_ms",
}


@dataclass(frozen=True)
class BenchCommand:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    output_file: Path
    dataset: Path


def bench_command(
    python: str,
    base_url: str,
    load: ServingLoad,
    requests: Sequence[LoadRequest],
    workdir: Path,
    env: Mapping[str, str],
) -> BenchCommand:
    """The command line that benchmarks `base_url` with the load's prompts, shape and seed."""
    dataset = workdir / "sglang-bench-prompts.jsonl"
    output = workdir / "sglang-bench.jsonl"
    output_len = max(r.max_new_tokens for r in requests)
    argv = [
        python, "-m", MODULE, "--backend", "sglang", "--base-url", base_url,
        "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--sharegpt-output-len", str(output_len), "--num-prompts", str(len(requests)),
        "--request-rate", "inf" if load.request_rate is None else str(load.request_rate),
        "--seed", str(load.seed), "--output-file", str(output), "--disable-tqdm",
    ]  # fmt: skip
    if load.max_concurrency:
        argv += ["--max-concurrency", str(load.max_concurrency)]
    return BenchCommand(tuple(argv), {**env, **OFFLINE}, output, dataset)


def write_dataset(path: Path, requests: Sequence[LoadRequest]) -> None:
    """The prompts as the ``custom`` dataset reads them: one conversation per line."""
    lines = [
        json.dumps({"conversations": [{"content": r.prompt}, {"content": "x" * r.max_new_tokens}]})
        for r in requests
    ]
    path.write_text("\n".join(lines) + "\n", "utf-8")


def run_bench(
    command: BenchCommand, requests: Sequence[LoadRequest], timeout_s: float
) -> dict[str, float]:
    """Run it; return its figures, or an InfrastructureError with the tail of its output."""
    write_dataset(command.dataset, requests)
    command.output_file.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            command.argv,
            env=dict(command.env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InfrastructureError(f"{MODULE} took over {timeout_s:g} s") from None
    log = command.output_file.with_suffix(".log")
    log.write_text(done.stdout + done.stderr, "utf-8")
    if done.returncode != 0 or not command.output_file.is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise InfrastructureError(f"{MODULE} exited {done.returncode} (log: {log}):\n{tail}")
    return parse_bench_output(command.output_file.read_text("utf-8"), len(requests))


def parse_bench_output(text: str, expected: int) -> dict[str, float]:
    """The figures of the last result line of an ``--output-file``; every request must have
    completed."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InfrastructureError(f"{MODULE} wrote an empty result file")
    result: dict[str, Any] = json.loads(lines[-1])
    completed = result.get("completed")
    if completed != expected:
        raise InfrastructureError(f"{MODULE} completed {completed} of {expected} requests")
    missing = [key for key in FIGURES.values() if not isinstance(result.get(key), int | float)]
    if missing:
        raise InfrastructureError(f"{MODULE}'s result lacks {', '.join(missing)}")
    return {metric: float(result[key]) for metric, key in FIGURES.items()}
