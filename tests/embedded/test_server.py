"""The server as a real process on 127.0.0.1, spoken to over SGLang's HTTP API."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from perfgate.engines.embedded.batch import Request
from perfgate.engines.embedded.server import READY_LINE
from perfgate.engines.embedded.worker import PlainWorker
from perfgate.engines.launch import free_port

from ..hang import HANG_S
from .common import DRAFT, SERVER_MODULE, TARGET, server_env, wait_healthy

STEPS = 3
GREEDY = {"temperature": 0, "max_new_tokens": 9}
START_TIMEOUT_S = 60.0


CHAIN = ("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(STEPS + 1))
TREE = ("--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    yield from _serve(tmp_path_factory, CHAIN)


@pytest.fixture(scope="module")
def tree_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    yield from _serve(tmp_path_factory, (*TREE, "--max-running-requests", "2"))


def _serve(
    tmp_path_factory: pytest.TempPathFactory, extra: tuple[str, ...]
) -> Iterator[tuple[httpx.Client, Path]]:
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "stderr.log"
    flags = [
        *("--model-path", TARGET, "--port", str(port), "--num-threads", "1"),
        *("--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", DRAFT, "--speculative-num-steps", str(STEPS)),
        *extra,
    ]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, *flags], stderr=stderr, env=server_env()
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=HANG_S) as client:
            wait_healthy(client, process, log, START_TIMEOUT_S)
            yield client, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert returncode == 0, log.read_text()
    assert READY_LINE in log.read_text()


def test_generate_matches_plain_greedy_and_reports_spec_meta_info(
    server: tuple[httpx.Client, Path], plain: PlainWorker
) -> None:
    client, _ = server
    response = client.post("/generate", json={"text": "Hello", "sampling_params": GREEDY})
    assert response.status_code == 200
    body = response.json()
    assert body["output_ids"] == plain.generate([Request(list(b"Hello"), 9)])[0].output_ids
    meta = body["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (5, 9, 0)
    assert meta["finish_reason"] == {"type": "length", "length": 9}
    assert 0 < meta["e2e_latency"] < 30
    assert 2 <= meta["spec_verify_ct"] <= 8
    assert meta["spec_accept_length"] == pytest.approx(9 / meta["spec_verify_ct"])


def test_batches_answer_with_lists(server: tuple[httpx.Client, Path]) -> None:
    client, _ = server
    texts = client.post("/generate", json={"text": ["a", "bc"], "sampling_params": GREEDY})
    ids = client.post("/generate", json={"input_ids": [[97], [98, 99]], "sampling_params": GREEDY})
    single = client.post("/generate", json={"input_ids": [97], "sampling_params": GREEDY})
    assert [r["output_ids"] for r in texts.json()] == [r["output_ids"] for r in ids.json()]
    assert [r["meta_info"]["prompt_tokens"] for r in ids.json()] == [1, 2]
    assert single.json()["output_ids"] == ids.json()[0]["output_ids"]


TEXTS = ["Return the number of items in the", "Raise ValueError if", "x"]


def test_a_tree_server_batches_and_returns_logprobs(
    tree_server: tuple[httpx.Client, Path], plain: PlainWorker
) -> None:
    client, _log = tree_server
    body = {
        "text": TEXTS,
        "sampling_params": {"temperature": 0, "max_new_tokens": 20},
        "return_logprob": True,
        "top_logprobs_num": 2,
    }
    results = client.post("/generate", json=body).json()
    expected = plain.generate([Request(list(t.encode()), 20, 2) for t in TEXTS])
    assert [r["output_ids"] for r in results] == [g.output_ids for g in expected]
    for result, generation in zip(results, expected, strict=True):
        meta = result["meta_info"]
        assert [t for _, t, _ in meta["output_token_logprobs"]] == generation.output_ids
        assert [lp for lp, _, _ in meta["output_token_logprobs"]] == pytest.approx(
            generation.output_logprobs, abs=1e-4
        )
        assert [[t for _, t, _ in top] for top in meta["output_top_logprobs"]] == [
            [t for _, t in top] for top in generation.output_top_logprobs or ()
        ]
        assert meta["spec_verify_ct"] <= 19
    info = client.get("/server_info").json()
    assert (info["speculative_eagle_topk"], info["max_running_requests"]) == (4, 2)
    total_verify = sum(r["meta_info"]["spec_verify_ct"] for r in results)
    # As SGLang counts it: (correct drafts + bonus) per request and verify pass.
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert total_verify > 0


def test_bad_requests_get_400_with_a_message(server: tuple[httpx.Client, Path]) -> None:
    client, _ = server
    typo = client.post("/generate", json={"text": "a", "sampling_params": {"temprature": 0}})
    assert typo.status_code == 400 and "unknown field `temprature`" in typo.text
    stop = client.post("/generate", json={"text": "a", "sampling_params": {"stop": "x"}})
    assert stop.status_code == 400 and "sampling_params.stop" in stop.json()["error"]["message"]
    batch = client.post("/generate", json={"text": ["a", "b"], "stream": True})
    assert batch.status_code == 400 and "a stream has one prompt" in batch.text
    broken = client.post("/generate", content=b"{not json")
    assert broken.status_code == 400 and "not JSON" in broken.json()["error"]["message"]


def test_server_info_and_flush_cache(server: tuple[httpx.Client, Path]) -> None:
    client, _ = server
    client.post("/generate", json={"text": "abc", "sampling_params": GREEDY})
    info = client.get("/server_info").json()
    assert info == client.get("/get_server_info").json()
    assert info["engine"] == "embedded" and info["speculative_num_steps"] == STEPS
    assert info["model_identity"].startswith(TARGET + "@sha256:")
    assert info["draft_model_identity"].startswith(DRAFT + "@sha256:")
    assert (info["device"], info["dtype"], info["tp_size"]) == ("cpu", "float32", 1)
    assert {"version", "device_name", "torch_version"} <= info.keys()
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert client.post("/flush_cache").status_code == 200
    flushed = client.get("/server_info").json()["internal_states"][0]
    assert flushed["avg_spec_accept_length"] == 0.0
    assert client.get("/health_generate").status_code == 200


def test_a_response_with_a_body_is_not_held_back_by_the_tcp_stack(
    server: tuple[httpx.Client, Path],
) -> None:
    """Headers and body leave in two writes: with Nagle's algorithm on, the body waited for
    the client's delayed ACK, 40 ms on Linux, in every answer with a body (a timed repeat's
    too). Over one keep-alive connection, an answer with a JSON body must come about as fast
    as /health's, which has none (it took 120 times as long)."""
    client, _ = server

    def median_ms(path: str) -> float:
        times = []
        for _ in range(9):
            began = time.perf_counter()
            client.get(path).raise_for_status()
            times.append(time.perf_counter() - began)
        return sorted(times)[len(times) // 2] * 1e3

    median_ms("/model_info")  # the connection open
    assert median_ms("/model_info") < 10 * median_ms("/health")


@pytest.mark.slow
def test_server_exits_when_its_parent_dies(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "stderr.log"
    launcher = (
        "import subprocess, sys\n"
        f"server = subprocess.Popen([sys.executable, '-m', {SERVER_MODULE!r}, '--model-path', "
        f"{TARGET!r}, '--port', '{port}', '--num-threads', '1'], stderr=open({str(log)!r}, 'wb'))\n"
        "print(server.pid, flush=True)\n"
        "server.wait()\n"
    )
    with (
        subprocess.Popen(
            [sys.executable, "-c", launcher], stdout=subprocess.PIPE, env=server_env()
        ) as parent,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=HANG_S) as client,
    ):
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _answers(client), log.read_text()
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10.0
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), log.read_text()
        assert not _answers(client)
    assert "exited; shutting down" in log.read_text()


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


def _running(pid: int) -> bool:
    """Whether pid is a live process (a zombie awaiting its reaper has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stream(client: httpx.Client, body: dict[str, object]) -> list[bytes]:
    with client.stream("POST", "/generate", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line for line in response.iter_lines() if line]  # type: ignore[misc]


@pytest.mark.slow
def test_a_stream_sends_sglangs_data_lines_then_done(
    server: tuple[httpx.Client, Path], plain: PlainWorker
) -> None:
    client, _ = server
    lines = _stream(client, {"text": "Hello", "sampling_params": GREEDY})
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    expected = plain.generate([Request(list(b"Hello"), 9)])[0].output_ids
    assert chunks[-1]["output_ids"] == expected and chunks[-1]["text"] == bytes(expected).decode()
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(set(counts)) and counts[0] == 1 and counts[-1] == 9
    assert 1 < len(chunks) < 9  # one chunk per cycle: several tokens each, as SGLang streams
    for chunk in chunks[:-1]:
        assert chunk["meta_info"]["finish_reason"] is None
        assert expected[: len(chunk["output_ids"])] == chunk["output_ids"]
    final = chunks[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 9}
    assert final["spec_verify_ct"] >= 2 and 0 <= final["spec_accept_rate"] <= 1
    assert final["spec_num_proposed_drafts"] == final["spec_verify_ct"] * STEPS
    assert sum(final["spec_correct_drafts_histogram"]) == final["spec_verify_ct"]


@pytest.mark.slow
def test_concurrent_requests_are_each_answered_with_their_own_output(
    server: tuple[httpx.Client, Path], plain: PlainWorker
) -> None:
    client, _ = server
    prompts = ["Hello", "Return the", "x", "import os"]
    expected = [
        o.output_ids for o in plain.generate([Request(list(p.encode()), 9) for p in prompts])
    ]
    with ThreadPoolExecutor(len(prompts)) as pool:
        streamed = list(
            pool.map(lambda p: _stream(client, {"text": p, "sampling_params": GREEDY}), prompts)
        )
    finals = [json.loads(lines[-2].removeprefix("data: ")) for lines in streamed]
    assert [f["output_ids"] for f in finals] == expected


@pytest.mark.slow
def test_a_request_without_temperature_samples_and_a_seed_repeats_it(
    server: tuple[httpx.Client, Path], plain: PlainWorker
) -> None:
    client, _ = server
    seeded = {"max_new_tokens": 24, "sampling_seed": 5}
    first = client.post("/generate", json={"text": "def", "sampling_params": seeded}).json()
    again = client.post("/generate", json={"text": "def", "sampling_params": seeded}).json()
    assert first["output_ids"] == again["output_ids"]  # same seed, same coins
    unseeded = [
        client.post("/generate", json={"text": "def", "sampling_params": {"max_new_tokens": 24}})
        for _ in range(3)
    ]
    assert all(r.status_code == 200 for r in unseeded)
    greedy = plain.generate([Request(list(b"def"), 24)])[0].output_ids
    outputs = [r.json()["output_ids"] for r in unseeded] + [first["output_ids"]]
    assert any(output != greedy for output in outputs)  # temperature 1.0 samples


@pytest.mark.slow
def test_sglang_clients_find_the_model_its_tokenizer_and_the_batch_limit(
    server: tuple[httpx.Client, Path],
) -> None:
    client, _ = server
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == TARGET
    assert models["data"][0]["max_model_len"] == 2048
    info = client.get("/model_info").json()
    assert info == client.get("/get_model_info").json()
    assert info["is_generation"] and info["served_model_name"] == TARGET
    tokenizer = Path(info["tokenizer_path"])
    assert (tokenizer / "tokenizer.json").is_file() and (tokenizer / "config.json").is_file()
    server_info = client.get("/server_info").json()
    assert server_info["tokenizer_path"] == info["tokenizer_path"]
    state = server_info["internal_states"][0]
    assert state["effective_max_running_requests_per_dp"] == 48  # SGLang's spec default
    assert state["last_gen_throughput"] >= 0.0


def test_a_second_stop_signal_is_ignored_while_the_server_stops() -> None:
    """The launcher and its supervisor may both send SIGTERM: the first leaves serve_forever,
    and a later one must not raise again in the cleanup or in Python's atexit."""
    from perfgate.engines.embedded import server

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        for signum in saved:
            signal.signal(signum, server._on_signal)
        with pytest.raises(server._Stop):
            server._on_signal(signal.SIGTERM, None)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
