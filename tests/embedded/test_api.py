"""SGLang's /generate request and response shapes."""

from __future__ import annotations

from typing import Any

import pytest

from perfgate.engines.embedded.api import (
    StreamText,
    parse_generate,
    parse_sampling,
    render_chunk,
    render_generation,
)
from perfgate.engines.embedded.batch import Generation, Request, RequestError
from perfgate.engines.embedded.sampling import GREEDY as GREEDY_SAMPLING
from perfgate.engines.embedded.sampling import TOP_K_ALL, Sampling

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
        ({"text": "a", "sampling_params": {"temperature": -1}}, "temperature"),
        ({"text": "a", "sampling_params": {"top_p": 0}}, "top_p"),
        ({"text": "a", "sampling_params": {"top_k": 0}}, "top_k"),
        ({"text": "a", "sampling_params": {"n": 2}}, "n must be 1"),
        ({"text": "a", "sampling_params": {"stop": ["x"]}}, "stop is"),
        ({"text": "a", "sampling_params": {"frequency_penalty": 0.5}}, "frequency_penalty"),
        ({"text": "a", "sampling_params": {"temprature": 0}}, "unknown field `temprature`"),
        ({"text": ["a", "b"], "stream": True}, "a stream has one prompt"),
        ({"text": "a", "input_ids": [1], "sampling_params": GREEDY}, "exactly one"),
        ({"input_ids": [1, "x"], "sampling_params": GREEDY}, "input_ids"),
        ({"text": [], "sampling_params": GREEDY}, "'text'"),
        ({"text": "a", "sampling_params": [GREEDY, GREEDY]}, "one per prompt"),
        ({"text": "a", "return_logprob": 1, "sampling_params": GREEDY}, "return_logprob"),
        (
            {
                "text": "a",
                "return_logprob": True,
                "top_logprobs_num": -1,
                "sampling_params": GREEDY,
            },
            "top_logprobs_num",
        ),
        (
            {
                "text": "a",
                "return_logprob": True,
                "logprob_start_len": 1,  # past the one-token input
                "sampling_params": GREEDY,
            },
            "output tokens only",
        ),
        (
            {"text": ["a", "b"], "return_logprob": [True], "sampling_params": GREEDY},
            "one per prompt",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_requests_the_engine_cannot_serve_say_why(body: Any, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_generate(body)


def test_a_request_without_sampling_params_samples_with_sglangs_defaults() -> None:
    request = parse_generate({"text": "a"})
    assert request.max_new_tokens == [128] and not request.stream
    assert request.requests()[0].sampling == Sampling(1.0, 1.0, TOP_K_ALL, 0.0, None)
    nulls = parse_sampling({"temperature": None, "top_p": None, "top_k": None})
    assert nulls.sampling == Sampling()  # null is SGLang's default, as in SamplingParams
    assert parse_sampling({"temperature": 0}).sampling.greedy
    assert parse_sampling({"top_k": 1}).sampling.greedy


def test_sampling_keys_that_change_nothing_here_are_accepted() -> None:
    body = {
        "ignore_eos": True,
        "min_new_tokens": 4,
        "stop": [],
        "stop_token_ids": None,
        "repetition_penalty": 1.0,
        "skip_special_tokens": False,
        "stream_interval": 2,
        "sampling_seed": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "max_new_tokens": 8,
    }
    parsed = parse_sampling(body)
    assert parsed.sampling == Sampling(0.5, 0.9, 20, 0.05, 7) and parsed.stream_interval == 2
    request = parse_generate({"text": "a", "stream": True, "sampling_params": body})
    assert request.stream and request.stream_intervals == [2]


def test_response_carries_sglang_0_5_23_meta_info() -> None:
    generation = Generation(list(b"abcdef"), spec_verify_ct=4, correct_drafts=(0, 1, 0, 0))
    response = render_generation(generation, 3, "r1", 0.25, draft_tokens=4)
    assert response["text"] == "abcdef" and response["output_ids"] == list(b"abcdef")
    assert response["meta_info"] == {
        "id": "r1",
        "finish_reason": {"type": "length", "length": 6},
        "prompt_tokens": 3,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": 6,
        "cached_tokens": 0,
        "e2e_latency": 0.25,
        "spec_accept_rate": 1 / 12,  # 1 correct of 4 passes x 3 drafts
        "spec_accept_length": 1.5,
        "spec_num_correct_drafts": 1,
        "spec_num_proposed_drafts": 12,
        "spec_verify_ct": 4,
        "spec_correct_drafts_histogram": [3, 1],
    }
    plain = render_generation(Generation([255]), 3, "r2", 0.1, draft_tokens=None)
    assert plain["text"] == "\ufffd" and "spec_verify_ct" not in plain["meta_info"]
    no_pass = render_generation(Generation([1]), 3, "r3", 0.1, draft_tokens=4)["meta_info"]
    assert not any(key.startswith("spec_") for key in no_pass)  # SGLang: verify_ct > 0 only


def test_a_streamed_chunk_holds_the_output_so_far_and_no_partial_character() -> None:
    text = StreamText()
    assert text.add([104, 195]) == "h"  # 195 starts a two-byte character: held back
    chunk = render_chunk("r", 2, [104, 195, 169], text.add([169]))
    assert chunk["text"] == "hé" and chunk["output_ids"] == [104, 195, 169]
    assert chunk["meta_info"]["finish_reason"] is None
    assert chunk["meta_info"]["completion_tokens"] == 3
    assert StreamText().add([195], final=True) == "\ufffd"


def test_logprob_flags_become_per_request_top_counts() -> None:
    body = {"text": ["a", "b"], "sampling_params": GREEDY, "return_logprob": True}
    greedy = GREEDY_SAMPLING
    assert parse_generate(body).requests() == [
        Request([97], 8, 0, greedy),
        Request([98], 8, 0, greedy),
    ]
    body |= {"return_logprob": [True, False], "top_logprobs_num": 5, "logprob_start_len": -1}
    assert parse_generate(body).requests() == [
        Request([97], 8, 5, greedy),
        Request([98], 8, None, greedy),
    ]
    plain = parse_generate({"text": "a", "sampling_params": GREEDY, "top_logprobs_num": 3})
    assert plain.requests() == [Request([97], 8, None, greedy)]  # no return_logprob: none


def test_logprobs_render_in_sglang_meta_info_shape() -> None:
    generation = Generation(
        [104, 105],
        output_logprobs=(-0.5, -1.25),
        output_top_logprobs=(((-0.5, 104), (-2.0, 97)), ((-1.25, 105), (-1.5, 32))),
    )
    meta = render_generation(generation, 1, "r", 0.1, draft_tokens=None, top_logprobs_num=2)[
        "meta_info"
    ]
    assert meta["input_token_logprobs"] == [] and meta["input_top_logprobs"] == []
    assert meta["output_token_logprobs"] == [[-0.5, 104, None], [-1.25, 105, None]]
    assert meta["output_top_logprobs"] == [
        [[-0.5, 104, None], [-2.0, 97, None]],
        [[-1.25, 105, None], [-1.5, 32, None]],
    ]
    only_tokens = render_generation(generation, 1, "r", 0.1, None, top_logprobs_num=0)
    assert "output_top_logprobs" not in only_tokens["meta_info"]
    assert (
        "output_token_logprobs" not in render_generation(generation, 1, "r", 0.1, None)["meta_info"]
    )
