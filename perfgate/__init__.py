"""perfgate: a CI performance gate for speculative decoding."""

from __future__ import annotations

__all__: list[str] = []
