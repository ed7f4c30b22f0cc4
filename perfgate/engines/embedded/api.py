"""SGLang's ``/generate`` request and response shapes, for the byte-level vocabulary.

Pure functions: JSON values in, JSON values out. A request the engine cannot serve raises
``RequestError``, which the server answers with HTTP 400.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from perfgate.engines.embedded.batch import Generation, Request, RequestError

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
DEFAULT_TEMPERATURE = 1.0  # SGLang's default: a request that omits it asks for sampling
GREEDY_BELOW = 1e-6  # SGLang decodes greedily below this temperature
UNSUPPORTED_FLAGS = ("stream", "return_hidden_states", "token_ids_logprob")
OUTPUT_ONLY = -1  # SGLang's default logprob_start_len: logprobs of output tokens only


@dataclass(frozen=True)
class GenerateRequest:
    prompts: list[list[int]]
    max_new_tokens: list[int]
    rids: list[str]
    is_batch: bool  # answer with a list, as SGLang does for list inputs
    top_logprobs: list[int | None] | None = None  # per prompt: None without return_logprob

    def requests(self) -> list[Request]:
        """Return one engine request per prompt."""
        top = self.top_logprobs or [None] * len(self.prompts)
        return [
            Request(prompt, max_new_tokens, top_n)
            for prompt, max_new_tokens, top_n in zip(
                self.prompts, self.max_new_tokens, top, strict=True
            )
        ]


def encode_text(text: str) -> list[int]:
    """Tokenize text: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode_text(ids: list[int]) -> str:
    """Detokenize byte ids; invalid UTF-8 becomes U+FFFD."""
    return bytes(ids).decode("utf-8", errors="replace")


def parse_generate(body: Any) -> GenerateRequest:
    """Validate a /generate body; return its prompts as token ids and their sampling limits."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    for flag in UNSUPPORTED_FLAGS:
        if body.get(flag):
            raise RequestError(f"{flag!r} is not supported by the embedded engine")
    prompts, is_batch = _parse_prompts(body)
    params = body.get("sampling_params") or {}
    if isinstance(params, dict):
        params = [params] * len(prompts)
    if not isinstance(params, list) or len(params) != len(prompts):
        raise RequestError("sampling_params must be an object, or a list of one per prompt")
    rids = body.get("rid") or [uuid.uuid4().hex for _ in prompts]
    rids = [rids] if isinstance(rids, str) else rids
    if not isinstance(rids, list) or len(rids) != len(prompts):
        raise RequestError("rid must be a string, or a list of one per prompt")
    max_new_tokens = [_parse_sampling(p) for p in params]
    top_logprobs = _parse_logprobs(body, len(prompts))
    return GenerateRequest(prompts, max_new_tokens, [str(r) for r in rids], is_batch, top_logprobs)


def _per_prompt(body: dict[str, Any], key: str, count: int, default: Any) -> list[Any]:
    value = body.get(key)
    if value is None:
        return [default] * count
    if isinstance(value, list):
        if len(value) != count:
            raise RequestError(f"{key} must be a value, or a list of one per prompt")
        return value
    return [value] * count


def _parse_logprobs(body: dict[str, Any], count: int) -> list[int | None]:
    """Return per prompt: None without return_logprob, else its top_logprobs_num."""
    wants = _per_prompt(body, "return_logprob", count, False)
    tops = _per_prompt(body, "top_logprobs_num", count, 0)
    starts = _per_prompt(body, "logprob_start_len", count, OUTPUT_ONLY)
    result: list[int | None] = []
    for want, top, start in zip(wants, tops, starts, strict=True):
        if not isinstance(want, bool):
            raise RequestError(f"return_logprob must be a bool, got {want!r}")
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise RequestError(f"top_logprobs_num must be an int >= 0, got {top!r}")
        if want and start != OUTPUT_ONLY:
            raise RequestError(
                f"logprob_start_len {start!r}: the embedded engine returns the logprobs of "
                f"output tokens only; omit it or pass {OUTPUT_ONLY}"
            )
        result.append(top if want else None)
    return result


def _parse_prompts(body: dict[str, Any]) -> tuple[list[list[int]], bool]:
    text: Any = body.get("text")
    input_ids: Any = body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError("send exactly one of 'text' and 'input_ids'")
    if isinstance(text, str):
        return [encode_text(text)], False
    if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
        return [encode_text(t) for t in text], True
    if text is not None:
        raise RequestError("'text' must be a string or a non-empty list of strings")
    if _is_ids(input_ids):
        return [input_ids], False
    if isinstance(input_ids, list) and input_ids and all(_is_ids(ids) for ids in input_ids):
        return input_ids, True
    raise RequestError("'input_ids' must be a list of ints or a non-empty list of such lists")


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def _parse_sampling(params: Any) -> int:
    if not isinstance(params, dict):
        raise RequestError("sampling_params must be a JSON object")
    if "temperature" not in params:
        raise RequestError(
            f"sampling_params.temperature is missing, and SGLang's default ({DEFAULT_TEMPERATURE})"
            ' samples; the embedded engine decodes greedily only: pass "temperature": 0'
        )
    temperature = params["temperature"]
    if not isinstance(temperature, int | float) or temperature >= GREEDY_BELOW:
        raise RequestError(
            f"sampling_params.temperature is {temperature!r}; the embedded engine decodes "
            "greedily only: pass 0"
        )
    max_new_tokens = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool):
        raise RequestError(f"sampling_params.max_new_tokens must be an int, got {max_new_tokens!r}")
    return max_new_tokens


def render_generation(
    generation: Generation,
    prompt_tokens: int,
    rid: str,
    e2e_latency_s: float,
    speculative: bool,
    top_logprobs_num: int | None = None,
) -> dict[str, Any]:
    """Return SGLang's response object for one finished sequence.

    top_logprobs_num: None unless the request asked for logprobs (``return_logprob``).
    """
    meta_info: dict[str, Any] = {
        "id": rid,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "cached_tokens": 0,
        "finish_reason": {"type": "length", "length": generation.completion_tokens},
        "e2e_latency": e2e_latency_s,
    }
    if speculative:
        meta_info["spec_verify_ct"] = generation.spec_verify_ct
        if generation.spec_verify_ct:
            meta_info["spec_accept_length"] = (
                generation.completion_tokens / generation.spec_verify_ct
            )
    if top_logprobs_num is not None:
        meta_info.update(render_logprobs(generation, top_logprobs_num))
    return {
        "text": decode_text(generation.output_ids),
        "output_ids": generation.output_ids,
        "meta_info": meta_info,
    }


def render_logprobs(generation: Generation, top_logprobs_num: int) -> dict[str, Any]:
    """Return SGLang's logprob fields: [logprob, token_id, text] entries, text null.

    ``output_top_logprobs`` comes with ``top_logprobs_num`` > 0 only, as in SGLang; the input
    fields are empty, since only output tokens' logprobs are returned.
    """
    logprobs = generation.output_logprobs or ()
    fields: dict[str, Any] = {
        "input_token_logprobs": [],
        "output_token_logprobs": [
            [logprob, token, None]
            for logprob, token in zip(logprobs, generation.output_ids, strict=True)
        ],
    }
    if top_logprobs_num > 0:
        fields["input_top_logprobs"] = []
        fields["output_top_logprobs"] = [
            [[logprob, token, None] for logprob, token in top]
            for top in generation.output_top_logprobs or ()
        ]
    return fields
