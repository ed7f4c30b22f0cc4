"""perfgate's load generator reads a stream as sglang.benchmark.serving does (a mock transport
streams SGLang's chunks, each at a time the test sets), and keeps its connections alive or not
(a small server on 127.0.0.1 that notes each request's client port)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import AsyncIterator
from types import SimpleNamespace

import httpx
import pytest

from perfgate.serving import generator
from perfgate.serving.generator import RequestTiming, run_load, stream_request
from perfgate.serving.load import LoadRequest, ServingLoad


def _stream(monkeypatch: pytest.MonkeyPatch, chunks: list[tuple[float, int]]) -> RequestTiming:
    """Stream one request whose chunks arrive at (seconds, completion tokens so far)."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(generator, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    async def body() -> AsyncIterator[bytes]:
        for at, tokens in chunks:
            clock.now = at
            chunk = {"text": "x" * tokens, "meta_info": {"completion_tokens": tokens}}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    async def run() -> RequestTiming:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            return await stream_request(client, LoadRequest("a prompt", chunks[-1][1]))

    return asyncio.run(run())


def test_a_chunk_that_brings_no_token_leaves_the_next_gap_to_the_chunk_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SGLang 0.5.16's async_request_sglang_generate: `if num_new_tokens == 0: continue`, before
    # it moves its last timestamp on, so the third token's gap runs from 0.020 s, not 0.030 s.
    timing = _stream(monkeypatch, [(0.010, 1), (0.020, 2), (0.030, 2), (0.045, 3)])
    assert timing.ttft_s == pytest.approx(0.010)
    assert timing.itl_s == pytest.approx((0.010, 0.025))
    assert timing.output_tokens == 3
    assert timing.latency_s == pytest.approx(0.045)


def test_a_chunk_of_several_tokens_spreads_its_gap_over_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timing = _stream(monkeypatch, [(0.010, 1), (0.040, 4), (0.050, 5)])
    assert timing.itl_s == pytest.approx((0.010, 0.010, 0.010, 0.010))
    assert (timing.output_tokens, timing.latency_s) == (5, pytest.approx(0.050))


def _client_ports(**options: bool) -> list[int]:
    """Send 4 requests, one at a time (run_load with `options`), to a server that keeps
    connections alive (HTTP/1.1); return the client port each arrived from."""
    ports: list[int] = []
    chunk = {"text": "x", "meta_info": {"completion_tokens": 1}}
    body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"

    class Generate(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            ports.append(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Generate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        load = ServingLoad(num_prompts=4, max_concurrency=1)
        requests = [LoadRequest("a prompt", 1)] * 4
        run = run_load(url, load, requests, 30.0, **options)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert [t.output_tokens for t in run.timings] == [1, 1, 1, 1]
    return ports


def test_a_load_keeps_its_connections_alive_unless_told_not_to() -> None:
    assert len(set(_client_ports())) == 1  # one connection, reused
    assert len(set(_client_ports(keepalive=False))) == 4  # a new one for every request
