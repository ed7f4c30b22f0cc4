"""A client for SGLang's native HTTP API, spoken by SGLang and by the embedded engine alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from perfgate.errors import InfrastructureError


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


class EngineClient:
    """Talks to one server at `base_url`; every failure becomes an InfrastructureError."""

    def __init__(self, base_url: str, timeout_s: float = 600.0) -> None:
        self.base_url = base_url
        self._http = httpx.Client(base_url=base_url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[Completion]:
        """Generate greedily for a batch of prompts, ignoring EOS so every length is fixed."""
        body = {
            "text": list(prompts),
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": max_new_tokens,
                "ignore_eos": True,
            },
        }
        payload = self._request("POST", "/generate", json=body)
        if not isinstance(payload, list) or len(payload) != len(prompts):
            raise InfrastructureError(
                f"{self.base_url}/generate answered {len(prompts)} prompts with "
                f"{type(payload).__name__} {str(payload)[:200]!r}"
            )
        return [parse_completion(item) for item in payload]

    def server_info(self) -> dict[str, Any]:
        """Return `/server_info`, falling back to the older `/get_server_info`."""
        try:
            info = self._request("GET", "/server_info")
        except InfrastructureError:
            info = self._request("GET", "/get_server_info")
        return info if isinstance(info, dict) else {"value": info}

    def flush_cache(self) -> None:
        self._request("POST", "/flush_cache")

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise InfrastructureError(f"{method} {self.base_url}{path} failed: {error}") from None
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


def parse_completion(item: Mapping[str, Any]) -> Completion:
    """Read one `/generate` result; `spec_verify_ct` is present on speculative servers."""
    meta = item.get("meta_info", {})
    verify_ct = meta.get("spec_verify_ct")
    return Completion(
        output_ids=tuple(int(t) for t in item.get("output_ids", ())),
        text=str(item.get("text", "")),
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)),
        spec_verify_ct=int(verify_ct) if verify_ct is not None else None,
        e2e_latency_s=float(meta.get("e2e_latency", 0.0)),
        meta_info=meta,
    )
