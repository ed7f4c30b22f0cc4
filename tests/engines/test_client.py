"""The client reads SGLang's responses as each release shapes them (httpx's mock transport).

The payloads follow SGLang's source: `meta_info` keys from `TokenizerManager`
(`_calculate_spec_decoding_metrics`, `add_logprob_to_meta_info`), logprob entries as
`(logprob, token_id, text|None)` from `detokenize_logprob_tokens`.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from perfgate.engines.client import EngineClient, parse_completion
from perfgate.errors import InfrastructureError

META_0_5_6 = {  # spec_accept_token_num / spec_draft_token_num, no histogram
    "prompt_tokens": 7,
    "completion_tokens": 12,
    "e2e_latency": 0.25,
    "spec_verify_ct": 4,
    "spec_accept_length": 3.0,
    "spec_accept_rate": 0.5,
    "spec_accept_token_num": 8,
    "spec_draft_token_num": 16,
}
META_0_5_23 = {  # renamed counters, the histogram
    "prompt_tokens": 7,
    "completion_tokens": 12,
    "e2e_latency": 0.25,
    "spec_verify_ct": 4,
    "spec_accept_length": 3.0,
    "spec_accept_rate": 0.5,
    "spec_num_correct_drafts": 8,
    "spec_num_proposed_drafts": 16,
    "spec_correct_drafts_histogram": [0, 1, 2, 1],
}


@pytest.mark.parametrize("meta", [META_0_5_6, META_0_5_23], ids=["0.5.6", "0.5.23"])
def test_speculative_counters_under_every_release_s_names(meta: dict[str, Any]) -> None:
    completion = parse_completion({"text": "abc", "output_ids": [1, 2, 3], "meta_info": meta})
    assert completion.spec_verify_ct == 4 and completion.spec is not None
    assert (completion.spec.correct_drafts, completion.spec.proposed_drafts) == (8, 16)
    assert completion.spec.accept_length == 3.0 and completion.e2e_latency_s == 0.25
    histogram = meta.get("spec_correct_drafts_histogram")
    assert completion.spec.histogram == (tuple(histogram) if histogram else None)


def test_a_plain_server_has_no_speculative_counters() -> None:
    completion = parse_completion({"output_ids": [5], "meta_info": {"completion_tokens": 1}})
    assert completion.spec is None and completion.spec_verify_ct is None


def test_logprobs_and_top_logprobs() -> None:
    meta = {
        "completion_tokens": 2,
        "output_token_logprobs": [[-0.1, 42, None], [-2.5, 7, "x"]],
        "output_top_logprobs": [[[-0.1, 42, None], [-3.0, 9, None]], None],
    }
    completion = parse_completion({"output_ids": [42, 7], "meta_info": meta})
    assert completion.output_token_logprobs == (-0.1, -2.5)
    assert completion.output_top_logprobs == (((42, -0.1), (9, -3.0)), None)


class FakeSGLang:
    """Answers like SGLang 0.5.x: /generate as a list, no /server_info before 0.5.6."""

    def __init__(self, has_server_info: bool = True, metrics: str | None = None) -> None:
        self.has_server_info = has_server_info
        self.metrics = metrics
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/generate":
            body = json.loads(request.content)
            self.bodies.append(body)
            results = [
                {"text": t, "output_ids": [len(t)], "meta_info": {"completion_tokens": 1}}
                for t in body["text"]
            ]
            return httpx.Response(200, json=results)
        if (path == "/server_info" and self.has_server_info) or path == "/get_server_info":
            return httpx.Response(200, json={"version": "0.5.23", "path": path})
        if path == "/metrics" and self.metrics is not None:
            return httpx.Response(200, text=self.metrics)
        return httpx.Response(404, json={"detail": "Not Found"})


def _client(server: FakeSGLang) -> EngineClient:
    return EngineClient("http://sglang", transport=httpx.MockTransport(server))


def test_batches_and_logprob_requests() -> None:
    server = FakeSGLang()
    with _client(server) as client:
        completions = client.generate(
            ["a", "bb", "ccc"], 8, return_logprob=True, top_logprobs_num=3, batch_size=2
        )
    assert [c.output_ids for c in completions] == [(1,), (2,), (3,)]
    assert [b["text"] for b in server.bodies] == [["a", "bb"], ["ccc"]]
    assert server.bodies[0]["sampling_params"] == {
        "temperature": 0.0,
        "max_new_tokens": 8,
        "ignore_eos": True,
    }
    assert (server.bodies[0]["return_logprob"], server.bodies[0]["top_logprobs_num"]) == (True, 3)
    with _client(server) as client:
        client.generate(["a"], 8)
    assert "return_logprob" not in server.bodies[-1]  # the embedded engine refuses it


def test_server_info_falls_back_to_the_old_name() -> None:
    with _client(FakeSGLang()) as client:
        assert client.server_info()["path"] == "/server_info"
    with _client(FakeSGLang(has_server_info=False)) as client:
        assert client.server_info()["path"] == "/get_server_info"


def test_metrics_only_where_enabled() -> None:
    with _client(FakeSGLang()) as client:
        assert client.metrics_text() is None
    with _client(FakeSGLang(metrics="sglang:x_total 1\n")) as client:
        assert client.metrics_text() == "sglang:x_total 1\n"


def test_a_wrong_answer_is_an_infrastructure_error() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="CUDA out of memory")

    with (
        EngineClient("http://x", transport=httpx.MockTransport(broken)) as client,
        pytest.raises(InfrastructureError, match="answered HTTP 500: CUDA out of memory"),
    ):
        client.generate(["a"], 1)


class BusyScheduler:
    """SGLang's `/flush_cache` while requests are still running or waiting: 400. From 0.5.10 a
    `?timeout=` makes it wait that long for an idle scheduler (here: idle in time); before
    0.5.10 the parameter is unknown, and the scheduler is idle after `busy_for` refusals."""

    def __init__(self, waits: bool, busy_for: int = 0) -> None:
        self.waits, self.busy_for, self.calls = waits, busy_for, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/flush_cache"
        self.calls += 1
        timeout = float(request.url.params.get("timeout", 0))
        if (self.waits and timeout > 0) or (not self.waits and self.calls > self.busy_for):
            return httpx.Response(200, text="Cache flushed.\n")
        return httpx.Response(400, text="Flush cache failed.\n")


def test_flush_cache_lets_sglang_wait_for_an_idle_scheduler() -> None:
    busy = BusyScheduler(waits=True)
    with EngineClient("http://x", transport=httpx.MockTransport(busy)) as client:
        client.flush_cache()
    assert busy.calls == 1


def test_flush_cache_retries_a_release_that_cannot_wait() -> None:
    busy = BusyScheduler(waits=False, busy_for=3)
    with EngineClient("http://x", transport=httpx.MockTransport(busy)) as client:
        client.flush_cache(timeout_s=30.0, retry_s=0.01)
    assert busy.calls == 4


def test_flush_cache_gives_up_after_its_timeout_with_the_server_s_answer() -> None:
    busy = BusyScheduler(waits=False, busy_for=10**6)
    with (
        EngineClient("http://x", transport=httpx.MockTransport(busy)) as client,
        pytest.raises(
            InfrastructureError, match=r"answered HTTP 400: Flush cache failed\..*0\.2 s"
        ),
    ):
        client.flush_cache(timeout_s=0.2, retry_s=0.05)
    assert busy.calls <= 5  # bounded: one try, then one every retry_s until the timeout
