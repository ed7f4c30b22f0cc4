"""A client for SGLang's native HTTP API, spoken by SGLang and by the embedded engine alike.

`meta_info` is read across SGLang releases: each value perfgate uses is looked up under every
name it has had (perfgate.sglang.facts.FACTS, newest first), so one client reads them all.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from perfgate.errors import InfrastructureError
from perfgate.sglang.facts import all_names

# How long SGLang may wait for an idle scheduler to flush its cache: what its own benchmark
# gives (`_DEFAULT_SGLANG_FLUSH_CACHE_TIMEOUT`, sglang/benchmark/serving.py in 0.5.20).
FLUSH_TIMEOUT_S = 60.0
FLUSH_RETRY_S = 0.5  # between tries, for releases before 0.5.10 (no server-side wait)
# One position's top logprobs: (token id, logprob) pairs, most likely first.
TopLogprobs = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class SpecStats:
    """A speculative request's counters from `meta_info` (finished requests only).

    `accept_length` is SGLang's `completion_tokens / spec_verify_ct`: accepted drafts plus
    the bonus token per verify round. The others are None on releases that lack them.
    """

    verify_ct: int
    accept_length: float | None = None
    accept_rate: float | None = None
    correct_drafts: int | None = None
    proposed_drafts: int | None = None
    histogram: tuple[int, ...] | None = None  # requests' verify rounds by correct drafts


@dataclass(frozen=True)
class Completion:
    """One prompt's result from `/generate`."""

    output_ids: tuple[int, ...]
    text: str
    prompt_tokens: int
    completion_tokens: int
    spec_verify_ct: int | None  # None on a plain server
    e2e_latency_s: float
    meta_info: Mapping[str, Any] = field(default_factory=dict)
    spec: SpecStats | None = None
    # With return_logprob: each output token's logprob, and (top_logprobs_num > 0) each
    # position's most likely tokens; empty when not asked for.
    output_token_logprobs: tuple[float | None, ...] = ()
    output_top_logprobs: tuple[TopLogprobs | None, ...] = ()

    @property
    def top_logprobs(self) -> tuple[tuple[tuple[float, int], ...], ...]:
        """Per output position, (logprob, token id) best first, as the equivalence rule reads
        them; a position the server left empty is an empty tuple, so positions stay aligned."""
        return tuple(
            tuple(sorted(((lp, tok) for tok, lp in position), key=lambda t: -t[0]))
            if position
            else ()
            for position in self.output_top_logprobs
        )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (`verify=True`), made once per process: each httpx.Client
    would make its own, loading the CA bundle again (about 50 ms of CPU), twice for every
    server launched (its health poll, then its client)."""
    return httpx.create_ssl_context()


class RequestRefused(InfrastructureError):
    """The server answered a request with HTTP 4xx: it does not support what was asked."""


class EngineClient:
    """Talks to one server at `base_url`; every failure becomes an InfrastructureError."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 600.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout_s, transport=transport, verify=tls_context()
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        *,
        return_logprob: bool = False,
        top_logprobs_num: int = 0,
        batch_size: int | None = None,
    ) -> list[Completion]:
        """Generate greedily, ignoring EOS so every length is fixed; `batch_size` prompts per
        request (all at once by default). With `return_logprob`, SGLang returns each output
        token's logprob, and with `top_logprobs_num` the top tokens of each position."""
        size = batch_size or len(prompts)
        completions: list[Completion] = []
        for start in range(0, len(prompts), size):
            batch = list(prompts[start : start + size])
            completions += self._generate_batch(
                batch, max_new_tokens, return_logprob, top_logprobs_num
            )
        return completions

    def _generate_batch(
        self, prompts: list[str], max_new_tokens: int, logprob: bool, top_n: int
    ) -> list[Completion]:
        body: dict[str, Any] = {
            "text": prompts,
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": max_new_tokens,
                "ignore_eos": True,
            },
        }
        if logprob or top_n:
            body |= {"return_logprob": True, "top_logprobs_num": top_n}
        payload = self._request("POST", "/generate", json=body)
        if not isinstance(payload, list) or len(payload) != len(prompts):
            raise InfrastructureError(
                f"{self.base_url}/generate answered {len(prompts)} prompts with "
                f"{type(payload).__name__} {str(payload)[:200]!r}"
            )
        return [parse_completion(item) for item in payload]

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST a JSON body to `path`; return the answer's JSON (HTTP 4xx: RequestRefused)."""
        return self._request("POST", path, json=body)

    def server_info(self) -> dict[str, Any]:
        """Return `/server_info`, falling back to its older name `/get_server_info`."""
        paths = all_names("server_info")
        for path in paths[:-1]:
            try:
                info = self._request("GET", path)
                break
            except InfrastructureError:
                continue
        else:
            info = self._request("GET", paths[-1])
        return info if isinstance(info, dict) else {"value": info}

    def flush_cache(
        self, timeout_s: float = FLUSH_TIMEOUT_S, retry_s: float = FLUSH_RETRY_S
    ) -> None:
        """POST `/flush_cache?timeout=...`; retry a refusal until `timeout_s` has passed.

        SGLang flushes only an idle scheduler and answers 400 otherwise (requests still
        running or waiting). From 0.5.10 `timeout` makes it wait that long for one, as its own
        benchmark asks (`flush_server_cache` in sglang/benchmark/serving.py, 0.5.20); older
        releases ignore the parameter and answer at once, so a refusal is retried every
        `retry_s` seconds. The embedded engine takes the parameter and flushes at once.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            wait_s = max(deadline - time.monotonic(), 0.0)
            try:
                self._request("POST", "/flush_cache", params={"timeout": f"{wait_s:.3f}"})
                return
            except RequestRefused as error:
                if time.monotonic() + retry_s > deadline:
                    raise RequestRefused(
                        f"{error.args[0].rstrip()} (the scheduler was not idle within "
                        f"{timeout_s:g} s)"
                    ) from None
            time.sleep(retry_s)

    def start_profile(self, request: Mapping[str, Any]) -> Any:
        """POST SGLang's `/start_profile` with a `ProfileReqInput` body (output_dir, num_steps,
        activities...); return the server's answer."""
        return self._request("POST", "/start_profile", json=dict(request))

    def stop_profile(self) -> Any:
        """POST `/stop_profile`; return the server's answer."""
        return self._request("POST", "/stop_profile")

    def metrics_text(self) -> str | None:
        """Return `/metrics` (Prometheus text), or None where the server has no such endpoint
        (SGLang without --enable-metrics, the embedded engine)."""
        try:
            response = self._http.get("/metrics")
        except httpx.HTTPError as error:
            raise InfrastructureError(f"GET {self.base_url}/metrics failed: {error}") from None
        return response.text if response.status_code == 200 else None

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise InfrastructureError(f"{method} {self.base_url}{path} failed: {error}") from None
        if 400 <= response.status_code < 500:
            raise RequestRefused(
                f"{method} {self.base_url}{path} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        if response.status_code != 200:
            raise InfrastructureError(
                f"{method} {self.base_url}{path} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text


def meta_value(meta: Mapping[str, Any], role: str) -> Any:
    """The value of `role` under whichever name this release gave it; None if absent."""
    for name in all_names(role):
        if meta.get(name) is not None:
            return meta[name]
    return None


def parse_completion(item: Mapping[str, Any]) -> Completion:
    """Read one `/generate` result; `spec_verify_ct` is present on speculative servers."""
    meta = item.get("meta_info", {})
    spec = parse_spec_stats(meta)
    return Completion(
        output_ids=tuple(int(t) for t in item.get("output_ids", ())),
        text=str(item.get("text", "")),
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)),
        spec_verify_ct=spec.verify_ct if spec else None,
        e2e_latency_s=float(meta.get("e2e_latency", 0.0)),
        meta_info=meta,
        spec=spec,
        output_token_logprobs=parse_token_logprobs(meta_value(meta, "token_logprobs")),
        output_top_logprobs=parse_top_logprobs(meta_value(meta, "top_logprobs")),
    )


def parse_spec_stats(meta: Mapping[str, Any]) -> SpecStats | None:
    """The speculative counters of a finished request; None on a plain server."""
    verify_ct = meta_value(meta, "verify_ct")
    if verify_ct is None:
        return None
    histogram = meta_value(meta, "histogram")
    return SpecStats(
        verify_ct=int(verify_ct),
        accept_length=_float(meta_value(meta, "accept_length")),
        accept_rate=_float(meta_value(meta, "accept_rate")),
        correct_drafts=_int(meta_value(meta, "correct_drafts")),
        proposed_drafts=_int(meta_value(meta, "proposed_drafts")),
        histogram=tuple(int(n) for n in histogram) if isinstance(histogram, list) else None,
    )


def parse_token_logprobs(value: Any) -> tuple[float | None, ...]:
    """`output_token_logprobs`: `[[logprob, token_id, text|null], ...]` -> logprobs."""
    if not isinstance(value, list):
        return ()
    return tuple(_float(entry[0]) if entry else None for entry in value)


def parse_top_logprobs(value: Any) -> tuple[TopLogprobs | None, ...]:
    """`output_top_logprobs`: per position `[[logprob, token_id, text|null], ...]` or null ->
    per position ((token_id, logprob), ...)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        tuple((int(entry[1]), float(entry[0])) for entry in position)
        if isinstance(position, list)
        else None
        for position in value
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
