"""Are the speculative outputs the plain ones? A pure rule over token ids.

Greedy speculative decoding must emit exactly the tokens plain greedy decoding emits: the
target verifies every draft token and keeps only those it would have chosen itself. So on a
deterministic backend (CPU fp32) any difference is a bug. The rule compares per prompt and
reports where the outputs first part, so a failure points at the cycle that went wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PromptComparison:
    """Spec vs plain output of one prompt."""

    index: int
    matched: bool
    prefix_len: int  # tokens equal from the start
    spec_len: int
    plain_len: int
    spec_token: int | None = None  # the tokens at the first divergence, if any
    plain_token: int | None = None

    @property
    def first_divergence(self) -> int | None:
        return None if self.matched else self.prefix_len


@dataclass(frozen=True)
class EquivalenceReport:
    """The comparison of every prompt; `ok` when every one matched."""

    prompts: tuple[PromptComparison, ...]

    @property
    def ok(self) -> bool:
        return all(p.matched for p in self.prompts)

    @property
    def mismatches(self) -> tuple[PromptComparison, ...]:
        return tuple(p for p in self.prompts if not p.matched)

    def summary(self) -> str:
        """One line: how many prompts matched, and the first divergence if any."""
        total, bad = len(self.prompts), self.mismatches
        if not bad:
            return f"{total}/{total} prompts token-identical"
        first = bad[0]
        return (
            f"{total - len(bad)}/{total} prompts token-identical; prompt {first.index} parts at "
            f"token {first.prefix_len} (spec {first.spec_token}, plain {first.plain_token})"
        )


def compare_outputs(
    spec: Sequence[Sequence[int]], plain: Sequence[Sequence[int]]
) -> EquivalenceReport:
    """Compare spec and plain token ids prompt by prompt.

    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]]).summary()
    '0/1 prompts token-identical; prompt 0 parts at token 2 (spec 3, plain 4)'
    """
    if len(spec) != len(plain):
        raise ValueError(f"{len(spec)} spec outputs against {len(plain)} plain outputs")
    return EquivalenceReport(
        tuple(_compare(i, s, p) for i, (s, p) in enumerate(zip(spec, plain, strict=True)))
    )


def _compare(index: int, spec: Sequence[int], plain: Sequence[int]) -> PromptComparison:
    prefix = 0
    for a, b in zip(spec, plain, strict=False):
        if a != b:
            break
        prefix += 1
    matched = prefix == len(spec) == len(plain)
    return PromptComparison(
        index=index,
        matched=matched,
        prefix_len=prefix,
        spec_len=len(spec),
        plain_len=len(plain),
        spec_token=None if matched or prefix >= len(spec) else spec[prefix],
        plain_token=None if matched or prefix >= len(plain) else plain[prefix],
    )
