"""Top logprobs for the equivalence rule: the request, SGLang's answer, and alignment."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from perfgate.config import load_config
from perfgate.engines.client import Completion, EngineClient, RequestRefused, parse_completion
from perfgate.engines.embedded.api import InputLogprobs, parse_generate, render_generation
from perfgate.engines.embedded.batch import Generation, RequestError
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


def test_the_embedded_api_reads_and_renders_input_logprobs_as_sglang() -> None:
    body = {
        "input_ids": [[104, 105, 33], [97, 98]],
        "sampling_params": {"temperature": 0, "max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": [1, -1],
        "top_logprobs_num": 2,
    }
    request = parse_generate(body)
    assert request.input_starts == [1, None]
    inputs = InputLogprobs((105, 33), (None, -0.25), (None, ((-0.25, 33), (-2.0, 32))))
    meta = render_generation(Generation([]), 3, "r", 0.0, None, 2, inputs)["meta_info"]
    # Entry 0 (the token at logprob_start_len) has no logprob, as SGLang returns it.
    assert meta["input_token_logprobs"] == [[None, 105, None], [-0.25, 33, None]]
    assert meta["input_top_logprobs"] == [None, [[-0.25, 33, None], [-2.0, 32, None]]]
    assert meta["output_token_logprobs"] == [] and meta["output_top_logprobs"] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logprob_start_len": 3}, r"logprob_start_len must be -1 .* 0\.\.2, got 3"),
        ({"logprob_start_len": -2}, "logprob_start_len"),
        ({"logprob_start_len": 0, "stream": True}, "not streamed"),
    ],
)
def test_input_logprobs_out_of_the_input_are_refused(change: dict[str, Any], message: str) -> None:
    body = {"input_ids": [1, 2, 3], "return_logprob": True, **change}
    with pytest.raises(RequestError, match=message):
        parse_generate(body)
