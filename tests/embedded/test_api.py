"""SGLang's /generate request and response shapes."""

from __future__ import annotations

from typing import Any

import pytest

from perfgate.engines.embedded.api import parse_generate, render_generation
from perfgate.engines.embedded.worker import Generation, RequestError

GREEDY = {"temperature": 0, "max_new_tokens": 8}


def test_text_is_utf8_bytes_and_a_list_is_a_batch() -> None:
    single = parse_generate({"text": "hé", "sampling_params": GREEDY})
    assert single.prompts == [[104, 195, 169]] and not single.is_batch
    batch = parse_generate({"text": ["a", "b"], "sampling_params": GREEDY})
    assert batch.prompts == [[97], [98]] and batch.is_batch
    assert batch.max_new_tokens == [8, 8] and len(set(batch.rids)) == 2


def test_input_ids_single_and_batch_with_per_prompt_params() -> None:
    single = parse_generate({"input_ids": [1, 2], "sampling_params": GREEDY, "rid": "r1"})
    assert single.prompts == [[1, 2]] and not single.is_batch and single.rids == ["r1"]
    params = [{"temperature": 0.0, "max_new_tokens": 3}, {"temperature": 0, "ignore_eos": True}]
    batch = parse_generate({"input_ids": [[1], [2, 3]], "sampling_params": params})
    assert batch.prompts == [[1], [2, 3]] and batch.max_new_tokens == [3, 128]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "a", "sampling_params": {"temperature": 0.7}}, "greedily only"),
        ({"text": "a"}, "temperature is missing"),
        ({"text": "a", "input_ids": [1], "sampling_params": GREEDY}, "exactly one"),
        ({"input_ids": [1, "x"], "sampling_params": GREEDY}, "input_ids"),
        ({"text": [], "sampling_params": GREEDY}, "'text'"),
        ({"text": "a", "sampling_params": [GREEDY, GREEDY]}, "one per prompt"),
        ({"text": "a", "stream": True, "sampling_params": GREEDY}, "'stream'"),
        ([1, 2], "JSON object"),
    ],
)
def test_requests_the_engine_cannot_serve_say_why(body: Any, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_generate(body)


def test_response_carries_sglang_meta_info() -> None:
    generation = Generation(list(b"abcdef"), spec_verify_ct=4, correct_drafts=(0, 1, 0, 0))
    response = render_generation(generation, 3, "r1", 0.25, speculative=True)
    assert response["text"] == "abcdef" and response["output_ids"] == list(b"abcdef")
    assert response["meta_info"] == {
        "id": "r1",
        "prompt_tokens": 3,
        "completion_tokens": 6,
        "cached_tokens": 0,
        "finish_reason": {"type": "length", "length": 6},
        "e2e_latency": 0.25,
        "spec_verify_ct": 4,
        "spec_accept_length": 1.5,
    }
    plain = render_generation(Generation([255]), 3, "r2", 0.1, speculative=False)
    assert plain["text"] == "\ufffd" and "spec_verify_ct" not in plain["meta_info"]
