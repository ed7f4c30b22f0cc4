"""Teacher forcing: the plain server scores the speculative output, token by token.

Two ``/generate`` requests, SGLang's native API (0.5.23), answered by the embedded engine
alike. The first reads the server's own token ids of each prompt (``return_logprob`` with
``logprob_start_len`` 0 lists every input token). The second sends ``input_ids`` = prompt +
speculative output with ``max_new_tokens`` 0, ``return_logprob`` and ``top_logprobs_num``,
and reads ``meta_info.input_token_logprobs`` (per input position from ``logprob_start_len``:
``[logprob, token_id, text]``) and ``meta_info.input_top_logprobs`` (per position a list of
``[logprob, token_id, text]``). SGLang leaves the first entry from ``logprob_start_len``
without a logprob (``[None] + values[:-1]``, ``SchedulerLogprobResultProcessor``), so the
scoring starts one token before the output: entry ``j + 1`` scores output token ``j``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfgate.engines.client import EngineClient, meta_value
from perfgate.equivalence import ForcedToken
from perfgate.errors import InfrastructureError

# The target's top tokens asked for at each scored position: its choice and the runner-up.
TEACHER_TOP_LOGPROBS = 2
_GREEDY_NO_OUTPUT = {"temperature": 0.0, "max_new_tokens": 0}


def prompt_token_ids(client: EngineClient, prompts: Sequence[str]) -> list[tuple[int, ...]]:
    """The server's token ids of each prompt, as its tokenizer made them."""
    body = {
        "text": list(prompts),
        "sampling_params": _GREEDY_NO_OUTPUT,
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    items = _items(client, body, len(prompts))
    return [
        tuple(int(entry[1]) for entry in _meta_list(item, "input_token_logprobs")) for item in items
    ]


def teacher_forcing_body(
    prompt_ids: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], top_n: int
) -> dict[str, Any]:
    """The ``/generate`` body that scores each output after its prompt, without generating."""
    return {
        "input_ids": [[*p, *o] for p, o in zip(prompt_ids, outputs, strict=True)],
        "sampling_params": _GREEDY_NO_OUTPUT,
        "return_logprob": True,
        "logprob_start_len": [len(p) - 1 for p in prompt_ids],
        "top_logprobs_num": top_n,
    }


def parse_forced(item: Mapping[str, Any], output: Sequence[int]) -> tuple[ForcedToken, ...]:
    """Read one answer of :func:`teacher_forcing_body` into the scores of ``output``."""
    tokens = _meta_list(item, "input_token_logprobs")
    tops = _meta_list(item, "input_top_logprobs")
    if len(tokens) != len(output) + 1 or len(tops) != len(output) + 1:
        raise InfrastructureError(
            f"teacher forcing: {len(output)} output tokens scored with {len(tokens)} "
            f"input_token_logprobs and {len(tops)} input_top_logprobs; expected "
            f"{len(output) + 1} of each (from the prompt's last token on)"
        )
    scores = []
    for token, entry, top in zip(output, tokens[1:], tops[1:], strict=True):
        if int(entry[1]) != token:
            raise InfrastructureError(
                f"teacher forcing: the server scored token {entry[1]} where the output has {token}"
            )
        ranked = sorted(((float(e[0]), int(e[1])) for e in top or ()), key=lambda t: -t[0])
        scores.append(ForcedToken(float(entry[0]), tuple(ranked)))
    return tuple(scores)


def score_outputs(
    client: EngineClient,
    prompts: Sequence[str],
    outputs: Sequence[Sequence[int]],
    top_n: int = TEACHER_TOP_LOGPROBS,
) -> tuple[tuple[ForcedToken, ...], ...]:
    """Score each prompt's output by teacher forcing on the server behind ``client``.

    Raises RequestRefused when the server does not serve input logprobs.
    """
    ids = prompt_token_ids(client, prompts)
    items = _items(client, teacher_forcing_body(ids, outputs, top_n), len(prompts))
    return tuple(parse_forced(item, output) for item, output in zip(items, outputs, strict=True))


def _items(client: EngineClient, body: Mapping[str, Any], count: int) -> list[Mapping[str, Any]]:
    payload = client.post_json("/generate", body)
    if not isinstance(payload, list) or len(payload) != count:
        raise InfrastructureError(
            f"{client.base_url}/generate answered {count} inputs with {str(payload)[:200]!r}"
        )
    return payload


def _meta_list(item: Mapping[str, Any], key: str) -> list[Any]:
    value = meta_value(item.get("meta_info", {}), key)
    if not isinstance(value, list):
        raise InfrastructureError(f"teacher forcing: meta_info.{key} missing from the answer")
    return value
