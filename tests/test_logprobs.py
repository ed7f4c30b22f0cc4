"""Top logprobs for the equivalence rule: the request, SGLang's answer, and alignment."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from perfgate.config import load_config
from perfgate.engines.client import Completion, EngineClient, RequestRefused, parse_completion
from perfgate.measure import TOP_LOGPROBS, reference_logprobs

from .conftest import write_config

# SGLang's meta_info shape: per output position, [logprob, token_id, text] (text may be null).
META = {
    "completion_tokens": 3,
    "prompt_tokens": 4,
    "output_top_logprobs": [
        [[-0.01, 11, "a"], [-4.2, 12, None]],
        [[-0.9, 21, None], [-0.7, 22, None]],  # listed out of order: sorted on reading
        None,
    ],
}


def test_sglang_top_logprobs_are_read_per_position() -> None:
    completion = parse_completion({"output_ids": [11, 22, 5], "meta_info": META})
    assert completion.top_logprobs == (
        ((-0.01, 11), (-4.2, 12)),
        ((-0.7, 22), (-0.9, 21)),
        (),
    )
    assert parse_completion({"output_ids": [1], "meta_info": {}}).top_logprobs == ()


def _client(handler: Any) -> EngineClient:
    client = EngineClient("http://server")
    client._http = httpx.Client(base_url="http://server", transport=httpx.MockTransport(handler))
    return client


def test_generate_asks_for_top_logprobs_only_when_told() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=[{"output_ids": [11, 22, 5], "meta_info": META}])

    with _client(handler) as client:
        client.generate(["p"], 3)
        (done,) = client.generate(["p"], 3, top_logprobs_num=5)
    assert "return_logprob" not in bodies[0]
    assert bodies[1]["return_logprob"] is True and bodies[1]["top_logprobs_num"] == 5
    assert done.top_logprobs[0] == ((-0.01, 11), (-4.2, 12))


def test_a_refusal_is_its_own_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "return_logprob unsupported"}})

    with _client(handler) as client:
        try:
            client.generate(["p"], 3, top_logprobs_num=5)
        except RequestRefused as error:
            assert "HTTP 400" in str(error)
        else:
            raise AssertionError("a 400 answer must raise RequestRefused")


class FakeClient:
    """Answers the logprob pass with given completions, or refuses it."""

    def __init__(self, completions: list[Completion] | None) -> None:
        self.completions = completions
        self.asked: list[int] = []

    def generate(self, prompts: Any, max_new_tokens: int, *, top_logprobs_num: int = 0) -> Any:
        self.asked.append(top_logprobs_num)
        if self.completions is None:
            raise RequestRefused("HTTP 400")
        return self.completions


def _completion(ids: tuple[int, ...], tops: int) -> Completion:
    top = tuple(((t, -0.1), (0, -2.0)) for t in ids[:tops])  # SGLang's (token id, logprob)
    return Completion(ids, "", 1, len(ids), None, 0.0, output_top_logprobs=top)


def test_reference_logprobs_stop_where_the_pass_left_the_timed_outputs(tmp_path: Path) -> None:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    scenario = replace(scenario, prompts=("a", "b"))
    client = FakeClient([_completion((1, 2, 3, 4), 4), _completion((5, 9, 9, 9), 4)])
    top = reference_logprobs(client, scenario, [(1, 2, 3, 4), (5, 6, 7, 8)])  # type: ignore[arg-type]
    assert client.asked == [TOP_LOGPROBS]
    assert [len(t) for t in top] == [4, 2]  # prompt b: position 1's context still matches
    assert reference_logprobs(FakeClient(None), scenario, [(1,), (2,)]) == ()  # type: ignore[arg-type]
