"""Are the speculative outputs the plain ones? A pure rule over token ids and logprobs.

Greedy speculative decoding must emit the tokens plain greedy decoding emits: the target
verifies every draft token and keeps only those it would have chosen itself. On a
deterministic backend (CPU fp32) any difference is a bug. On GPUs in bf16, and with tensor
parallelism, the verify pass (several tokens at once) and plain decoding (one token) run
different kernels, so the two can part where the target's top two tokens are nearly tied,
without any bug; after that the texts differ, legitimately.

The rule, per prompt:

1. Find the first position where the outputs differ (none: the prompt **matches**, every
   token compared exactly, and nothing more is asked of the servers). The tokens before it
   are the plain run's own choices, with the same prefix behind them: compared exactly.
2. From there on, when the plain server scored the speculative output by teacher forcing
   (the prompt and the speculative tokens as its input; per position the target's logprob
   of the speculative token and its top tokens, :class:`ForcedToken`), **every** remaining
   position is compared: the speculative token must be the target's top token, or ranked
   at most ``near_tie_margin`` nats below it (the margin: top-1 logprob minus the
   speculative token's). A near tie never ends the comparison; a token ranked further
   below, a position left unscored, or scores at odds with each other (the speculative
   token scored above the listed top token) fail. The prompt is a **near tie** when every
   position passes; near ties are allowed for up to ``max_near_tie_share`` of the prompts.
3. Without teacher forcing (an engine that refuses it), the plain run's own top logprobs at
   the first divergence decide, and the rest of that prompt goes unchecked: if both tokens
   are among them and the plain run's own token is ranked at most ``near_tie_margin`` nats
   above the speculative one, the divergence is a near tie; anything else **diverged**: a
   token outside the plain run's top list, no logprobs, or a list that ranks the
   speculative token *above* the plain run's own (a negative margin: the list does not
   describe the choice the plain run made, so it cannot vouch for the speculative token).
4. Outputs of different lengths diverge (EOS is ignored, so lengths are fixed).

Margins within :data:`LOGPROB_RESOLUTION` of the threshold count as at it: logprobs arrive as
float32. Nothing compared is nothing proven: a report of no prompts, or a prompt for which
neither server generated a token, is not equivalent. A prompt's share of matched tokens
never offsets another prompt's failure; the report gives the share of tokens compared
(100% with teacher forcing), every near-tie position with its margin, and every failing one.
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


@dataclass(frozen=True)
class ForcedToken:
    """The plain model's scores of one speculative token, given the speculative prefix."""

    logprob: float  # of the speculative token
    top: tuple[tuple[float, int], ...]  # (logprob, token id), best first


# Per prompt, per output position: the teacher-forced scores; None for a prompt not scored.
TeacherScores = Sequence[Sequence[ForcedToken] | None]


class Outcome(enum.StrEnum):
    MATCH = "match"  # token for token the same
    NEAR_TIE = "near_tie"  # parted where the target's top two were nearly tied
    DIVERGED = "diverged"  # parted for a reason numerics cannot explain


@dataclass(frozen=True)
class TokenCheck:
    """A teacher-forced position where the speculative token is not the target's top token.

    ``margin`` is the target's top-1 logprob minus that of the speculative token (nats),
    None when the position was not scored. ``outcome`` is NEAR_TIE (allowed) or DIVERGED.
    """

    position: int
    spec_token: int
    top_token: int | None
    margin: float | None
    outcome: Outcome

    def describe(self) -> str:
        if self.margin is None:
            return f"token {self.position} (spec {self.spec_token}, not scored)"
        if self.outcome is Outcome.NEAR_TIE:
            return f"token {self.position} (margin {self.margin:.3g})"
        return (
            f"token {self.position} (spec {self.spec_token}, top {self.top_token}, "
            f"margin {self.margin:.3g})"
        )


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
    forced: bool = False
    compared: int | None = None  # None: the matched outputs, or the prefix before a divergence
    positions: tuple[TokenCheck, ...] = ()

    @property
    def matched(self) -> bool:
        return self.outcome is Outcome.MATCH

    @property
    def first_divergence(self) -> int | None:
        return None if self.matched else self.prefix_len

    @property
    def tokens_compared(self) -> int:
        """Tokens compared: all when matched, else the prefix and every scored position."""
        if self.compared is not None:
            return min(self.compared, self.plain_len)
        return self.plain_len if self.matched else self.prefix_len

    def describe(self) -> str:
        """One phrase: where this prompt parted, with which tokens and margin."""
        if self.matched:
            return f"prompt {self.index} matches"
        if self.forced:
            return self._describe_forced()
        text = f"prompt {self.index} parts at token {self.prefix_len}"
        if self.spec_token is None or self.plain_token is None:
            return f"{text} (spec {self.spec_len} tokens, plain {self.plain_len})"
        text += f" (spec {self.spec_token}, plain {self.plain_token}"
        if self.margin is None:
            return f"{text}, no logprobs)"
        bound = ">" if self.margin_is_bound else ""
        return f"{text}, margin {bound}{self.margin:.3g})"

    def _describe_forced(self) -> str:
        text = f"prompt {self.index} parts at token {self.prefix_len}"
        if self.spec_len != self.plain_len:
            text += f" (spec {self.spec_len} tokens, plain {self.plain_len})"
        else:
            text += f" (spec {self.spec_token}, plain {self.plain_token})"
        ties = [c.describe() for c in self.positions if c.outcome is Outcome.NEAR_TIE]
        bad = [c.describe() for c in self.positions if c.outcome is Outcome.DIVERGED]
        parts = [f"near ties at {', '.join(ties)}"] if ties else []
        parts += [f"not the target's choice at {', '.join(bad)}"] if bad else []
        if parts:
            text += f" [{'; '.join(parts)}]"
        return text


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
        """The share of the plain tokens compared (1.0 with teacher forcing everywhere)."""
        total = sum(p.plain_len for p in self.prompts)
        checked = sum(p.tokens_compared for p in self.prompts)
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
    teacher: TeacherScores | None = None,
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
    teacher
        Per prompt, the plain server's teacher-forced scores of each speculative token
        (:class:`ForcedToken`), or None where it did not score that prompt: a prompt that
        parts is then judged at its first divergence only.
    near_tie_margin, max_near_tie_share
        The largest logprob gap (nats) that counts as a near tie, and the share of prompts
        allowed to part at one.

    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]]).diverged[0].describe()
    'prompt 0 parts at token 2 (spec 3, plain 4, no logprobs)'
    >>> tied = [[], [], [(-0.70, 4), (-0.71, 3)]]
    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]], [tied], max_near_tie_share=1.0).ok
    True
    >>> forced = [ForcedToken(-0.1, ((-0.1, 1),)), ForcedToken(-0.1, ((-0.1, 2),)),
    ...           ForcedToken(-0.75, ((-0.70, 4), (-0.75, 3)))]
    >>> compare_outputs([[1, 2, 3]], [[1, 2, 4]], teacher=[forced]).checked_share
    1.0
    """
    if len(spec) != len(plain):
        raise ValueError(f"{len(spec)} spec outputs against {len(plain)} plain outputs")
    tops = list(plain_top_logprobs or [])
    forced = list(teacher or [])
    comparisons = []
    for i, (s, p) in enumerate(zip(spec, plain, strict=True)):
        scores = forced[i] if i < len(forced) else None
        if scores is not None and list(s) != list(p):
            comparisons.append(_compare_forced(i, s, p, scores, near_tie_margin))
        else:
            comparisons.append(_compare(i, s, p, tops[i] if i < len(tops) else (), near_tie_margin))
    return EquivalenceReport(tuple(comparisons), near_tie_margin, max_near_tie_share)


def _compare_forced(
    index: int,
    spec: Sequence[int],
    plain: Sequence[int],
    scores: Sequence[ForcedToken],
    threshold: float,
) -> PromptComparison:
    """Judge every position from the first divergence on by the teacher-forced scores."""
    prefix = _common_prefix(spec, plain)
    checks = [
        check_forced_token(position, spec[position], scores[position], threshold)
        if position < len(scores)
        else TokenCheck(position, spec[position], None, None, Outcome.DIVERGED)
        for position in range(prefix, len(spec))
    ]
    failed = len(spec) != len(plain) or any(c.outcome is Outcome.DIVERGED for c in checks)
    return PromptComparison(
        index=index,
        outcome=Outcome.DIVERGED if failed else Outcome.NEAR_TIE,
        prefix_len=prefix,
        spec_len=len(spec),
        plain_len=len(plain),
        spec_token=spec[prefix] if prefix < len(spec) else None,
        plain_token=plain[prefix] if prefix < len(plain) else None,
        margin=checks[0].margin if checks else None,  # checks start at the first divergence
        forced=True,
        compared=prefix + sum(1 for p in range(prefix, len(spec)) if p < len(scores)),
        positions=tuple(c for c in checks if c.outcome is not Outcome.MATCH),
    )


def check_forced_token(
    position: int, token: int, scored: ForcedToken, threshold: float
) -> TokenCheck:
    """Whether a speculative token is the target's choice at a teacher-forced position.

    MATCH when it is the target's top token; NEAR_TIE when the top token's logprob is at
    most ``threshold`` nats above its own (within :data:`LOGPROB_RESOLUTION`); DIVERGED when
    further below, when nothing was scored, or when the scores are at odds (the token
    scored above the listed top token).

    >>> check_forced_token(7, 3, ForcedToken(-0.75, ((-0.70, 4), (-0.75, 3))), 0.1).outcome
    <Outcome.NEAR_TIE: 'near_tie'>
    >>> check_forced_token(7, 3, ForcedToken(-3.0, ((-0.05, 4),)), 0.1).describe()
    'token 7 (spec 3, top 4, margin 2.95)'
    """
    if not scored.top:
        return TokenCheck(position, token, None, None, Outcome.DIVERGED)
    top_logprob, top_token = scored.top[0]
    if top_token == token:
        return TokenCheck(position, token, top_token, 0.0, Outcome.MATCH)
    margin = top_logprob - scored.logprob
    near = -LOGPROB_RESOLUTION <= margin <= threshold + LOGPROB_RESOLUTION
    return TokenCheck(
        position, token, top_token, margin, Outcome.NEAR_TIE if near else Outcome.DIVERGED
    )


def _common_prefix(spec: Sequence[int], plain: Sequence[int]) -> int:
    prefix = 0
    for a, b in zip(spec, plain, strict=False):
        if a != b:
            break
        prefix += 1
    return prefix


def _compare(
    index: int, spec: Sequence[int], plain: Sequence[int], top: TopLogprobs, threshold: float
) -> PromptComparison:
    prefix = _common_prefix(spec, plain)
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
