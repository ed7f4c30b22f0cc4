"""The server as a real process on 127.0.0.1, spoken to over SGLang's HTTP API."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from perfgate.engines.embedded.server import READY_LINE
from perfgate.engines.embedded.worker import PlainWorker

from .common import DRAFT, SERVER_MODULE, TARGET, server_env

STEPS = 3
GREEDY = {"temperature": 0, "max_new_tokens": 9}
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(client: httpx.Client, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"server exited early:\n{log.read_text()}"
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"server not healthy after {START_TIMEOUT_S} s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "stderr.log"
    flags = [
        *("--model-path", TARGET, "--port", str(port), "--num-threads", "1"),
        *("--speculative-algorithm", "EAGLE3"),
        *("--speculative-draft-model-path", DRAFT, "--speculative-num-steps", str(STEPS)),
        *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(STEPS + 1)),
    ]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, *flags], stderr=stderr, env=server_env()
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
            _wait_healthy(client, process, log)
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
    assert body["output_ids"] == plain.generate(list(b"Hello"), 9).output_ids
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


def test_bad_requests_get_400_with_a_message(server: tuple[httpx.Client, Path]) -> None:
    client, _ = server
    hot = client.post("/generate", json={"text": "a", "sampling_params": {"temperature": 0.8}})
    assert hot.status_code == 400 and "greedily" in hot.json()["error"]["message"]
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


def test_server_exits_when_its_parent_dies(tmp_path: Path) -> None:
    port = _free_port()
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
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client,
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
