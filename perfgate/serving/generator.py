"""perfgate's load generator: SGLang's streaming ``/generate``, timed as SGLang times it.

Each request streams (``"stream": true``, greedy, EOS ignored); its time to first token is
when the first chunk with text arrives, and each later chunk's gap is spread evenly over the
tokens it brought, as ``sglang.benchmark.serving`` computes inter-token latency (0.5.16 and
0.5.23, ``async_request_sglang_generate``): a chunk that brings no new token is skipped, so
the next gap runs from the last chunk that brought one. A request's output tokens are the
``meta_info.completion_tokens`` of its last chunk with text, SGLang's ``output_len``; a load's
window runs from just before its first request is sent to the end of its last stream (see
docs/serving.md for SGLang's). A load is bounded: ``num_prompts`` requests, and the
scenario's request timeout for the whole of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass

import httpx

from perfgate.errors import InfrastructureError
from perfgate.serving.load import LoadRequest, ServingLoad, arrival_gaps_s


@dataclass(frozen=True)
class RequestTiming:
    """One streamed request."""

    ttft_s: float
    itl_s: tuple[float, ...]  # one per token after the first
    output_tokens: int
    latency_s: float


@dataclass(frozen=True)
class LoadRun:
    """One load, every request finished."""

    timings: tuple[RequestTiming, ...]
    duration_s: float  # first request sent to last request finished


def run_load(
    base_url: str,
    load: ServingLoad,
    requests: Sequence[LoadRequest],
    timeout_s: float,
    *,
    keepalive: bool = True,
) -> LoadRun:
    """Send the load to the server at `base_url`; an InfrastructureError if any request fails.

    Connections are kept alive between requests; with `keepalive` false each request opens a
    new one, closed when it ends (as SGLang's client does, an aiohttp session per request).
    """
    try:
        run = _run(base_url, load, requests, keepalive)
        return asyncio.run(asyncio.wait_for(run, timeout_s))
    except TimeoutError:
        raise InfrastructureError(
            f"{base_url}: the serving load of {len(requests)} requests took over {timeout_s:g} s"
        ) from None


async def _run(
    base_url: str, load: ServingLoad, requests: Sequence[LoadRequest], keepalive: bool
) -> LoadRun:
    limit: AbstractAsyncContextManager[object] = (
        asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else nullcontext()
    )
    connections = httpx.Limits(
        max_connections=load.max_concurrency or len(requests),
        max_keepalive_connections=None if keepalive else 0,
    )
    async with httpx.AsyncClient(base_url=base_url, timeout=None, limits=connections) as client:
        started = time.perf_counter()
        tasks = []
        for request, gap_s in zip(requests, arrival_gaps_s(load), strict=True):
            tasks.append(asyncio.create_task(_limited(client, request, limit)))
            if gap_s:
                await asyncio.sleep(gap_s)
        timings = await asyncio.gather(*tasks)
        return LoadRun(tuple(timings), time.perf_counter() - started)


async def _limited(
    client: httpx.AsyncClient, request: LoadRequest, limit: AbstractAsyncContextManager[object]
) -> RequestTiming:
    async with limit:
        return await stream_request(client, request)


async def stream_request(client: httpx.AsyncClient, request: LoadRequest) -> RequestTiming:
    """Stream one request; time its first token and the tokens after it."""
    body = {
        "text": request.prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": request.max_new_tokens,
            "ignore_eos": True,
        },
        "stream": True,
    }
    sent = time.perf_counter()
    ttft_s, last_at, last_tokens, itl_s = 0.0, sent, 0, []
    try:
        async with client.stream("POST", "/generate", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                raise InfrastructureError(
                    f"/generate answered HTTP {response.status_code}: {text[:300]}"
                )
            async for line in response.aiter_lines():
                data = line.removeprefix("data: ").strip()
                if not data or data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    raise InfrastructureError(f"/generate stream failed: {chunk['error']}")
                if not chunk.get("text"):
                    continue
                now, tokens = time.perf_counter(), int(chunk["meta_info"]["completion_tokens"])
                if not ttft_s:
                    ttft_s = now - sent
                elif tokens <= last_tokens:
                    continue  # no new token: the next gap runs from the chunk that brought one
                else:
                    itl_s += [(now - last_at) / (tokens - last_tokens)] * (tokens - last_tokens)
                last_at, last_tokens = now, tokens
    except httpx.HTTPError as error:
        raise InfrastructureError(f"POST {client.base_url}/generate failed: {error}") from None
    if not ttft_s:
        raise InfrastructureError(
            f"/generate streamed no text for a {request.max_new_tokens}-token request"
        )
    return RequestTiming(ttft_s, tuple(itl_s), last_tokens, last_at - sent)
