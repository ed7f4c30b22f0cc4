"""SGLang's ``/generate`` request and response shapes, for the byte-level vocabulary.

Pure functions: JSON values in, JSON values out. A request the engine cannot serve raises
``RequestError``, which the server answers with HTTP 400. Names, defaults and shapes are
SGLang 0.5.23's: ``sampling_params`` as ``sglang.api.v1.SamplingParams`` (unknown keys
refused, every default SGLang's), streamed chunks as ``TokenizerManager._handle_batch_output``
writes them (without ``--incremental-streaming-output``: the text and ``output_ids`` so far),
and the speculative fields of ``meta_info`` as ``_calculate_spec_decoding_metrics`` adds them
to a finished request.
"""

from __future__ import annotations

import codecs
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.engines.embedded.batch import Generation, Request, RequestError, TopLogprobs
from perfgate.engines.embedded.sampling import GREEDY, TOP_K_ALL, Sampling

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
UNSUPPORTED_FLAGS = ("return_hidden_states", "token_ids_logprob")
OUTPUT_ONLY = -1  # SGLang's default logprob_start_len: logprobs of output tokens only
WEIGHT_VERSION = "default"  # SGLang's --weight-version default

# sglang.api.v1.SamplingParams (0.5.23), whose unknown keys SGLang refuses. The embedded
# engine honours these ...
SAMPLING_KEYS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "sampling_seed",
    "stream_interval",
    "n",  # 1 only
)
# ... and takes these at values that change nothing for a byte vocabulary without special
# tokens or EOS (every sequence runs to max_new_tokens): any ignore_eos, min_new_tokens up to
# max_new_tokens, the special-token flags; the rest only at SGLang's defaults.
NO_EFFECT_KEYS = (
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "min_new_tokens",
)
DEFAULT_ONLY: Mapping[str, tuple[Any, ...]] = {
    "stop": (None, "", []),
    "stop_token_ids": (None, []),
    "stop_regex": (None, "", []),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "json_schema": (None,),
    "regex": (None,),
    "ebnf": (None,),
    "structural_tag": (None,),
    "logit_bias": (None, {}),
    "custom_params": (None,),
    "beam_width": (None, 1),
    "watermark": (None,),
    "choice": (None, []),
}
ALL_SAMPLING_KEYS = (*SAMPLING_KEYS, *NO_EFFECT_KEYS, *DEFAULT_ONLY)


@dataclass(frozen=True)
class GenerateRequest:
    prompts: list[list[int]]
    max_new_tokens: list[int]
    rids: list[str]
    is_batch: bool  # answer with a list, as SGLang does for list inputs
    top_logprobs: list[int | None] | None = None  # per prompt: None without return_logprob
    samplings: list[Sampling] | None = None  # per prompt; None: greedy (perfgate's own calls)
    stream: bool = False
    stream_intervals: list[int] = field(default_factory=list)  # per prompt; empty: every step
    # Per prompt: where its input logprobs start (logprob_start_len), None for none.
    input_starts: list[int | None] = field(default_factory=list)

    def requests(self) -> list[Request]:
        """Return one engine request per prompt."""
        top = self.top_logprobs or [None] * len(self.prompts)
        samplings = self.samplings or [GREEDY] * len(self.prompts)
        return [
            Request(prompt, max_new_tokens, top_n, sampling)
            for prompt, max_new_tokens, top_n, sampling in zip(
                self.prompts, self.max_new_tokens, top, samplings, strict=True
            )
        ]


@dataclass(frozen=True)
class InputLogprobs:
    """The target's logprobs of a request's input tokens, from ``logprob_start_len`` on.

    As SGLang 0.5.23 returns them (``SchedulerLogprobResultProcessor``): entry j is input
    token ``start + j``; its logprob given the tokens before it, and the top tokens of that
    distribution. Entry 0 has neither (None), whatever the start.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    top: tuple[TopLogprobs | None, ...]


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
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError(f"stream must be a bool, got {stream!r}")
    prompts, is_batch = _parse_prompts(body)
    if stream and is_batch:
        raise RequestError("a stream has one prompt: send one 'text' or 'input_ids' per request")
    logprobs, starts = _parse_logprobs(body, prompts)
    if stream and any(start is not None for start in starts):
        raise RequestError("input logprobs (logprob_start_len >= 0) are not streamed; stream false")
    params = body.get("sampling_params") or {}
    if isinstance(params, dict):
        params = [params] * len(prompts)
    if not isinstance(params, list) or len(params) != len(prompts):
        raise RequestError("sampling_params must be an object, or a list of one per prompt")
    rids = body.get("rid") or [uuid.uuid4().hex for _ in prompts]
    rids = [rids] if isinstance(rids, str) else rids
    if not isinstance(rids, list) or len(rids) != len(prompts):
        raise RequestError("rid must be a string, or a list of one per prompt")
    parsed = [parse_sampling(p) for p in params]
    return GenerateRequest(
        prompts,
        [p.max_new_tokens for p in parsed],
        [str(r) for r in rids],
        is_batch,
        logprobs,
        [p.sampling for p in parsed],
        stream,
        [p.stream_interval for p in parsed],
        starts,
    )


def _per_prompt(body: dict[str, Any], key: str, count: int, default: Any) -> list[Any]:
    value = body.get(key)
    if value is None:
        return [default] * count
    if isinstance(value, list):
        if len(value) != count:
            raise RequestError(f"{key} must be a value, or a list of one per prompt")
        return value
    return [value] * count


def _parse_logprobs(
    body: dict[str, Any], prompts: list[list[int]]
) -> tuple[list[int | None], list[int | None]]:
    """Return per prompt its top_logprobs_num (None without return_logprob) and where its
    input logprobs start (None: output tokens only, SGLang's ``logprob_start_len`` -1)."""
    count = len(prompts)
    wants = _per_prompt(body, "return_logprob", count, False)
    tops = _per_prompt(body, "top_logprobs_num", count, 0)
    starts = _per_prompt(body, "logprob_start_len", count, OUTPUT_ONLY)
    result: list[int | None] = []
    inputs: list[int | None] = []
    for want, top, start, prompt in zip(wants, tops, starts, prompts, strict=True):
        if not isinstance(want, bool):
            raise RequestError(f"return_logprob must be a bool, got {want!r}")
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise RequestError(f"top_logprobs_num must be an int >= 0, got {top!r}")
        ok = isinstance(start, int) and not isinstance(start, bool)
        if want and (not ok or not OUTPUT_ONLY <= start < len(prompt)):
            raise RequestError(
                f"logprob_start_len must be {OUTPUT_ONLY} (output tokens only) or a position "
                f"in the input, 0..{len(prompt) - 1}, got {start!r}"
            )
        result.append(top if want else None)
        inputs.append(start if want and start != OUTPUT_ONLY else None)
    return result, inputs


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


@dataclass(frozen=True)
class ParsedSampling:
    max_new_tokens: int
    sampling: Sampling
    stream_interval: int


def parse_sampling(params: Any) -> ParsedSampling:
    """Read one ``sampling_params`` object with SGLang's defaults; refuse what cannot be served.

    A key SGLang does not know is refused as SGLang refuses it; a key it knows but the
    embedded engine does not implement is accepted only at a value that changes nothing.
    """
    if not isinstance(params, dict):
        raise RequestError("sampling_params must be a JSON object")
    for key, value in params.items():
        if key not in ALL_SAMPLING_KEYS:
            raise RequestError(
                f"unknown field `{key}` in sampling_params, expected one of "
                + ", ".join(f"`{k}`" for k in ALL_SAMPLING_KEYS)
            )
        if key in DEFAULT_ONLY and value not in DEFAULT_ONLY[key]:
            raise RequestError(
                f"sampling_params.{key} is {value!r}; the embedded engine implements only its "
                f"default ({DEFAULT_ONLY[key][-1]!r}): omit it"
            )
    max_new_tokens = _int(params, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, low=0)
    min_new_tokens = _int(params, "min_new_tokens", 0, low=0)
    if min_new_tokens > max_new_tokens:
        raise RequestError(f"min_new_tokens {min_new_tokens} exceeds max_new_tokens")
    if _int(params, "n", 1, low=1) != 1:
        raise RequestError("sampling_params.n must be 1: the embedded engine returns one sample")
    sampling = Sampling(
        temperature=_number(params, "temperature", 1.0, low=0.0),
        top_p=_number(params, "top_p", 1.0, low=0.0, high=1.0, open_low=True),
        top_k=_int(params, "top_k", TOP_K_ALL, low=-1),
        min_p=_number(params, "min_p", 0.0, low=0.0, high=1.0),
        seed=_optional_int(params, "sampling_seed"),
    )
    if sampling.top_k == 0:
        raise RequestError("sampling_params.top_k must be -1 (all) or >= 1, got 0")
    interval = _int(params, "stream_interval", 1, low=1)
    return ParsedSampling(max_new_tokens, sampling, interval)


def _int(params: Mapping[str, Any], key: str, default: int, *, low: int) -> int:
    value = params.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise RequestError(f"sampling_params.{key} must be an int >= {low}, got {value!r}")
    return value


def _optional_int(params: Mapping[str, Any], key: str) -> int | None:
    return None if params.get(key) is None else _int(params, key, 0, low=0)


def _number(
    params: Mapping[str, Any],
    key: str,
    default: float,
    *,
    low: float,
    high: float | None = None,
    open_low: bool = False,
) -> float:
    value = params.get(key)
    if value is None:  # SGLang treats null as its default
        return default
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and (value > low if open_low else value >= low) and (high is None or value <= high)
    if not ok:
        bounds = f"{'>' if open_low else '>='} {low}" + (f" and <= {high}" if high else "")
        raise RequestError(f"sampling_params.{key} must be a number {bounds}, got {value!r}")
    return float(value)


def render_generation(
    generation: Generation,
    prompt_tokens: int,
    rid: str,
    e2e_latency_s: float,
    draft_tokens: int | None,
    top_logprobs_num: int | None = None,
    input_logprobs: InputLogprobs | None = None,
) -> dict[str, Any]:
    """Return SGLang's response object for one finished sequence.

    draft_tokens: the server's --speculative-num-draft-tokens, None on a plain server.
    top_logprobs_num: None unless the request asked for logprobs (``return_logprob``).
    input_logprobs: the input tokens' logprobs, when ``logprob_start_len`` asked for them.
    """
    meta_info = progress_meta(rid, prompt_tokens, generation.completion_tokens)
    meta_info["finish_reason"] = {"type": "length", "length": generation.completion_tokens}
    meta_info["e2e_latency"] = e2e_latency_s
    if draft_tokens is not None:
        meta_info.update(spec_meta(generation, draft_tokens))
    if top_logprobs_num is not None:
        meta_info.update(render_logprobs(generation, top_logprobs_num, input_logprobs))
    return {
        "text": decode_text(generation.output_ids),
        "output_ids": generation.output_ids,
        "meta_info": meta_info,
    }


def progress_meta(rid: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """Return the ``meta_info`` every chunk carries; ``finish_reason`` is null until the end."""
    return {
        "id": rid,
        "finish_reason": None,
        "prompt_tokens": prompt_tokens,
        "weight_version": WEIGHT_VERSION,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
    }


def spec_meta(generation: Generation, draft_tokens: int) -> dict[str, Any]:
    """Return SGLang 0.5.23's speculative fields of a finished request's ``meta_info``.

    As ``TokenizerManager._calculate_spec_decoding_metrics`` computes them, present once the
    request had a verify pass: drafts proposed are verify passes times (draft tokens - 1),
    the accept rate counts correct drafts only, the accept length includes the bonus token,
    and the histogram counts verify passes by their correct drafts.
    """
    verify_ct = generation.spec_verify_ct
    if not verify_ct:
        return {}
    correct = sum(generation.correct_drafts)
    proposed = verify_ct * (draft_tokens - 1)
    meta: dict[str, Any] = {}
    if proposed > 0:
        meta = {
            "spec_accept_rate": correct / proposed,
            "spec_accept_length": generation.completion_tokens / verify_ct,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify_ct,
        }
    histogram = [0] * (max(generation.correct_drafts, default=0) + 1)
    for count in generation.correct_drafts:
        histogram[count] += 1
    meta["spec_correct_drafts_histogram"] = histogram
    return meta


class StreamText:
    """The text of a stream so far: bytes that end inside a UTF-8 character wait for the rest,
    as SGLang's detokenizer holds back an incomplete character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def add(self, ids: list[int], final: bool = False) -> str:
        """Take the next output ids; return the text so far."""
        self.text += self._decoder.decode(bytes(ids), final=final)
        return self.text


def render_chunk(rid: str, prompt_tokens: int, output_ids: list[int], text: str) -> dict[str, Any]:
    """Return one streamed chunk before the last: the text and output ids so far."""
    return {
        "text": text,
        "output_ids": output_ids,
        "meta_info": progress_meta(rid, prompt_tokens, len(output_ids)),
    }


def render_logprobs(
    generation: Generation, top_logprobs_num: int, inputs: InputLogprobs | None = None
) -> dict[str, Any]:
    """Return SGLang's logprob fields: [logprob, token_id, text] entries, text null.

    ``output_top_logprobs`` and ``input_top_logprobs`` come with ``top_logprobs_num`` > 0
    only, as in SGLang; the input fields are empty unless ``inputs`` are given.
    """
    logprobs = generation.output_logprobs or ()
    fields: dict[str, Any] = {
        "input_token_logprobs": [
            [logprob, token, None]
            for logprob, token in zip(inputs.logprobs, inputs.token_ids, strict=True)
        ]
        if inputs
        else [],
        "output_token_logprobs": [
            [logprob, token, None]
            for logprob, token in zip(logprobs, generation.output_ids, strict=True)
        ],
    }
    if top_logprobs_num > 0:
        fields["input_top_logprobs"] = [_render_top(top) for top in inputs.top] if inputs else []
        fields["output_top_logprobs"] = [
            _render_top(top) for top in generation.output_top_logprobs or ()
        ]
    return fields


def _render_top(top: TopLogprobs | None) -> list[list[Any]] | None:
    return None if top is None else [[logprob, token, None] for logprob, token in top]
