"""SGLang's ``/generate`` request and response shapes, for the byte-level vocabulary.

Pure functions: JSON values in, JSON values out. A request the engine cannot serve raises
``RequestError``, which the server answers with HTTP 400.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from perfgate.engines.embedded.worker import Generation, RequestError

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
DEFAULT_TEMPERATURE = 1.0  # SGLang's default: a request that omits it asks for sampling
GREEDY_BELOW = 1e-6  # SGLang decodes greedily below this temperature
UNSUPPORTED_FLAGS = ("stream", "return_logprob", "return_hidden_states")


@dataclass(frozen=True)
class GenerateRequest:
    prompts: list[list[int]]
    max_new_tokens: list[int]
    rids: list[str]
    is_batch: bool  # answer with a list, as SGLang does for list inputs


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
    return GenerateRequest(prompts, max_new_tokens, [str(r) for r in rids], is_batch)


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
) -> dict[str, Any]:
    """Return SGLang's response object for one finished sequence."""
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
    return {
        "text": decode_text(generation.output_ids),
        "output_ids": generation.output_ids,
        "meta_info": meta_info,
    }
