"""Are the speculative outputs the plain ones? A pure rule over token ids and logprobs.

Greedy speculative decoding must emit the tokens plain greedy decoding emits: the target
verifies every draft token and keeps only those it would have chosen itself. On a
deterministic backend (CPU fp32) any difference is a bug. On GPUs in bf16, and with tensor
parallelism, the verify pass (several tokens at once) and plain decoding (one token) run
different kernels, so the two can part where the target's top two tokens are nearly tied,
without any bug; after that the texts differ, legitimately.

The rule, per prompt:

1. Find the first position where the outputs differ (none: the prompt **matches**).
2. Look up the plain run's top logprobs at that position (the distribution the plain
   server chose its token from, with the same prefix behind it). If both tokens are among
   them and the plain run's own token is ranked at most ``near_tie_margin`` nats above the
   speculative one (the margin, from 0 to the threshold: logprobs arrive as float32, so a
   margin within :data:`LOGPROB_RESOLUTION` of the threshold counts as at it), the
   divergence is a **near tie**: reported, and allowed for up to ``max_near_tie_share`` of
   the prompts.
3. Anything else **diverged** and fails: a token the target ranks far below its choice (a
   draft token accepted that the target would not have chosen), a token outside the plain
   run's top list, an output of another length, a divergence where no logprobs are known,
   or one where the list ranks the speculative token *above* the plain run's own (a
   negative margin: the list does not describe the choice the plain run made, so it cannot
   vouch for the speculative token).

Nothing compared is nothing proven: a report of no prompts, or a prompt for which neither
server generated a token, is not equivalent.

A real bug fails wherever it happens, late in the output too: every position is compared,
not a prefix of fixed length, and a prompt's share of matched tokens never offsets another
prompt's failure. After a near tie the rest of that prompt is not comparable; the report
counts how many tokens were checked.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

# A divergence at most this far apart (nats, top-1 minus top-2 logprob) is a near tie.
DEFAULT_NEAR_TIE_MARGIN = 0.1
# The share of prompts allowed to part at a near tie.
DEFAULT_MAX_NEAR_TIE_SHARE = 0.2
# Logprobs arrive as float32 (about 7 significant digits): two margins closer than this (nats)
# are the same margin, so one printed as the threshold is at the threshold.
LOGPROB_RESOLUTION = 1e-6

# Per output position, the plain run's top tokens as (logprob, token id), best first.
TopLogprobs = Sequence[Sequence[tuple[float, int]]]


class Outcome(enum.StrEnum):
    MATCH = "match"  # token for token the same
    NEAR_TIE = "near_tie"  # parted where the target's top two were nearly tied
    DIVERGED = "diverged"  # parted for a reason numerics cannot explain


@dataclass(frozen=True)
class PromptComparison:
    """Spec vs plain output of one prompt, and what their first difference means.

    ``margin`` is the plain run's logprob of its own token minus that of the speculative
    token at the first divergence (nats; near 0: a near tie). When the speculative token
    is not among the plain run's top tokens, ``margin`` is a lower bound and
    ``margin_is_bound`` is True. ``margin`` is None where no logprobs were available.
    """

    index: int
    outcome: Outcome
    prefix_len: int  # tokens equal from the start
    spec_len: int
    plain_len: int
    spec_token: int | None = None  # the tokens at the first divergence, if any
    plain_token: int | None = None
    margin: float | None = None
    margin_is_bound: bool = False

    @property
    def matched(self) -> bool:
        return self.outcome is Outcome.MATCH

    @property
    def first_divergence(self) -> int | None:
        return None if self.matched else self.prefix_len

    def describe(self) -> str:
        """One phrase: where this prompt parted, with which tokens and margin."""
        if self.matched:
            return f"prompt {self.index} matches"
        text = f"prompt {self.index} parts at token {self.prefix_len}"
        if self.spec_token is None or self.plain_token is None:
            return f"{text} (spec {self.spec_len} tokens, plain {self.plain_len})"
        text += f" (spec {self.spec_token}, plain {self.plain_token}"
        if self.margin is None:
            return f"{text}, no logprobs)"
        bound = ">" if self.margin_is_bound else ""
        return f"{text}, margin {bound}{self.margin:.3g})"


@dataclass(frozen=True)
class EquivalenceReport:
    """The comparison of every prompt; ``ok`` when none diverged and near ties are few."""

    prompts: tuple[PromptComparison, ...]
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN
    max_near_tie_share: float = DEFAULT_MAX_NEAR_TIE_SHARE

    @property
    def ok(self) -> bool:
        """True when something was compared, nothing diverged and near ties are few."""
        return not self.unchecked and not self.diverged and not self.too_many_near_ties

    @property
    def unchecked(self) -> bool:
        """True when nothing proves equivalence: no prompts, or a prompt without tokens."""
        return not self.prompts or any(p.spec_len == p.plain_len == 0 for p in self.prompts)

    @property
    def mismatches(self) -> tuple[PromptComparison, ...]:
        return tuple(p for p in self.prompts if not p.matched)

    @property
    def near_ties(self) -> tuple[PromptComparison, ...]:
        return tuple(p for p in self.prompts if p.outcome is Outcome.NEAR_TIE)

    @property
    def diverged(self) -> tuple[PromptComparison, ...]:
        return tuple(p for p in self.prompts if p.outcome is Outcome.DIVERGED)

    @property
    def too_many_near_ties(self) -> bool:
        return len(self.near_ties) > self.max_near_tie_share * len(self.prompts)

    @property
    def checked_share(self) -> float:
        """The share of the plain tokens compared before a near tie ended the comparison."""
        total = sum(p.plain_len for p in self.prompts)
        checked = sum(p.plain_len if p.matched else p.prefix_len for p in self.prompts)
        return checked / total if total else 1.0

    def summary(self) -> str:
        """One line: how many prompts matched, then every divergence with its margin."""
        if not self.prompts:
            return "nothing compared: no prompts"
        empty = [str(p.index) for p in self.prompts if p.spec_len == p.plain_len == 0]
        note = ""
        if empty:
            note = f"nothing compared for prompt(s) {', '.join(empty)}: no tokens generated; "
        return note + self._comparison_summary()

    def _comparison_summary(self) -> str:
        total, bad = len(self.prompts), self.mismatches
        if not bad:
            return f"{total}/{total} prompts token-identical"
        text = f"{total - len(bad)}/{total} prompts token-identical"
        if self.near_ties:
            limit = "too many" if self.too_many_near_ties else "allowed"
            text += f"; {len(self.near_ties)} near tie(s) ({limit}): "
            text += ", ".join(p.describe() for p in self.near_ties)
        if self.diverged:
            text += f"; {len(self.diverged)} diverged: "
            text += ", ".join(p.describe() for p in self.diverged)
        return text + f"; {self.checked_share:.0%} of tokens compared"


def compare_outputs(
    spec: Sequence[Sequence[int]],
    plain: Sequence[Sequence[int]],
    plain_top_logprobs: Sequence[TopLogprobs] | None = None,
    *,
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN,
    max_near_tie_share: float = DEFAULT_MAX_NEAR_TIE_SHARE,
) -> EquivalenceReport:
    """Compare spec and plain token ids prompt by prompt (see the module's rule).

    Parameters
    ----------
    spec, plain
        Per prompt, the token ids each server generated.
    plain_top_logprobs
        Per prompt and output position, the plain run's top tokens as (logprob, token id);
        None, or shorter lists, where the server gave none: a divergence there fails.
    near_tie_margin, max_near_tie_share
        The largest logprob gap (nats) that counts as a near tie, and the share of prompts
        allowed to part at one.

    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]]).diverged[0].describe()
    'prompt 0 parts at token 2 (spec 3, plain 4, no logprobs)'
    >>> tied = [[], [], [(-0.70, 4), (-0.71, 3)]]
    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]], [tied], max_near_tie_share=1.0).ok
    True
    """
    if len(spec) != len(plain):
        raise ValueError(f"{len(spec)} spec outputs against {len(plain)} plain outputs")
    tops = list(plain_top_logprobs or [])
    comparisons = tuple(
        _compare(i, s, p, tops[i] if i < len(tops) else (), near_tie_margin)
        for i, (s, p) in enumerate(zip(spec, plain, strict=True))
    )
    return EquivalenceReport(comparisons, near_tie_margin, max_near_tie_share)


def _compare(
    index: int, spec: Sequence[int], plain: Sequence[int], top: TopLogprobs, threshold: float
) -> PromptComparison:
    prefix = 0
    for a, b in zip(spec, plain, strict=False):
        if a != b:
            break
        prefix += 1
    if prefix == len(spec) == len(plain):
        return PromptComparison(index, Outcome.MATCH, prefix, len(spec), len(plain))
    if prefix >= len(spec) or prefix >= len(plain):
        # One output stops early: lengths are fixed (EOS ignored), so this is no near tie.
        return PromptComparison(index, Outcome.DIVERGED, prefix, len(spec), len(plain))
    spec_token, plain_token = spec[prefix], plain[prefix]
    margin, is_bound = divergence_margin(
        top[prefix] if prefix < len(top) else (), spec_token, plain_token
    )
    near = is_near_tie(margin, is_bound, threshold)
    return PromptComparison(
        index=index,
        outcome=Outcome.NEAR_TIE if near else Outcome.DIVERGED,
        prefix_len=prefix,
        spec_len=len(spec),
        plain_len=len(plain),
        spec_token=spec_token,
        plain_token=plain_token,
        margin=margin,
        margin_is_bound=is_bound,
    )


def is_near_tie(margin: float | None, is_bound: bool, threshold: float) -> bool:
    """Whether a divergence's margin makes it a near tie (see the module's rule).

    The plain run's own token must rank first, at most ``threshold`` nats above the
    speculative one: a negative margin is no tie but a list at odds with the plain run's
    choice, and a margin within :data:`LOGPROB_RESOLUTION` of the threshold is at it.

    >>> is_near_tie(-0.7 - -0.8, False, 0.1)  # 0.10000000000000009 in float64
    True
    >>> is_near_tie(-0.01, False, 0.1)
    False
    """
    if margin is None or is_bound:
        return False
    return 0.0 <= margin <= threshold + LOGPROB_RESOLUTION


def divergence_margin(
    top: Sequence[tuple[float, int]], spec_token: int, plain_token: int
) -> tuple[float | None, bool]:
    """How far apart the plain run ranked the two tokens at a divergence, in nats.

    Returns ``(logprob(plain) - logprob(spec), False)`` when both are in ``top``;
    ``(logprob(plain) - lowest listed logprob, True)``, a lower bound, when the speculative
    token is not listed; ``(None, False)`` when nothing is known (no list, or the plain
    token itself missing from it: the list belongs to another context).
    """
    logprobs = {token: logprob for logprob, token in top}
    if plain_token not in logprobs:
        return None, False
    if spec_token in logprobs:
        return logprobs[plain_token] - logprobs[spec_token], False
    return logprobs[plain_token] - min(logprobs.values()), True
