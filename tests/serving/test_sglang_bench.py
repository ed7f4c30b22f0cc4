"""SGLang's own sglang.benchmark.serving (0.5.23, from its wheel) against the embedded server:
streaming on, its default ready check, offline, every request finished, its figures parsed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from perfgate.config import load_config
from perfgate.serving.figures import SERVING_METRICS
from perfgate.serving.load import ServingLoad, build_requests
from perfgate.serving.measure import measure_serving
from perfgate.serving.sglang_bench import (
    FIGURES,
    OFFLINE,
    bench_command,
    parse_bench_output,
    run_bench,
)
from perfgate.sglang.facts import PINNED

from ..conftest import TINY_SCENARIO, write_config
from ..engines.sglang_wheels import client_python

pytestmark = pytest.mark.slow

REQUIRE = "PERFGATE_REQUIRE_SGLANG_CLIENT"  # CI: a missing client fails instead of skipping


@pytest.fixture(scope="module")
def client() -> Path:
    python = client_python(PINNED)
    if not python.is_file():
        message = f"no SGLang {PINNED} client: python tests/engines/sglang_wheels.py --client"
        if os.environ.get(REQUIRE):
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("server") / "server.log"
    flags = [
        *("--model-path", "perfgate/llama-tiny", "--port", str(port), "--num-threads", "1"),
        *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path"),
        *("perfgate/eagle3-llama-tiny", "--speculative-num-steps", "3"),
        *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
    ]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "perfgate.engines.embedded.server", *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # No wait here: SGLang's benchmark waits for /v1/models itself (its default ready check).
    yield f"http://127.0.0.1:{port}"
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0, log.read_text()


LOAD = ServingLoad(num_prompts=6, request_rate=8.0, max_concurrency=3, output_len=12, seed=2)
PROMPTS = ("Return the number of items in the", "Raise ValueError if the", "Create a new")


def test_sglangs_serving_benchmark_streams_from_the_embedded_server_offline(
    client: Path, base_url: str, tmp_path: Path
) -> None:
    requests = build_requests(LOAD, PROMPTS, 12)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS"))}
    command = bench_command(str(client), base_url, LOAD, requests, tmp_path, env)
    assert (
        "--disable-stream" not in command.argv and "--ready-check-timeout-sec" not in command.argv
    )
    assert all(command.env[k] == v for k, v in OFFLINE.items())
    figures = run_bench(command, requests, timeout_s=300)
    assert set(figures) == set(FIGURES) and all(v > 0 for v in figures.values())
    log = command.output_file.with_suffix(".log").read_text()
    assert "Server ready" in log  # its own wait for /v1/models
    assert "Successful requests:                     6" in log
    assert parse_bench_output(command.output_file.read_text(), 6) == figures
    with httpx.Client(base_url=base_url) as http:
        assert http.get("/server_info").json()["internal_states"][0]["avg_spec_accept_length"] > 1


def test_a_serving_scenario_records_sglangs_figures_beside_perfgates(
    client: Path, base_url: str, tmp_path: Path
) -> None:
    config = load_config(write_config(tmp_path, TINY_SCENARIO))
    load = replace(LOAD, cross_check="sglang", cross_check_python=str(client))
    scenario = replace(config.scenarios["tiny"], serving=load, repeats=2, prompts=PROMPTS)
    samples = measure_serving(base_url, scenario, "spec", tmp_path)
    for metric in SERVING_METRICS:
        assert len(samples[metric]) == 2  # perfgate's: one per repeat
    for metric in FIGURES:
        assert len(samples[metric]) == 1 and samples[metric][0] > 0  # SGLang's: one run


def test_a_result_file_that_lost_requests_is_refused() -> None:
    line = '{"completed": 5, "output_throughput": 10.0}'
    with pytest.raises(Exception, match="completed 5 of 6 requests"):
        parse_bench_output(line, 6)
