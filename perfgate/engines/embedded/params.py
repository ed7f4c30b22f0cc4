"""Speculative parameters, resolved and checked with SGLang's rules and wording.

SGLang (``server_args.py``, the EAGLE family's handler):

- all three unset: an automatic choice; for a ``LlamaForCausalLM`` target, (5, 4, 8);
- ``--speculative-num-steps`` unset while another is set: refused (an assertion in SGLang);
- ``topk == 1``: a chain, ``num_draft_tokens`` is forced to ``num_steps + 1`` with the warning
  "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when
  speculative_eagle_topk == 1";
- ``topk > 1``: a tree of ``num_steps`` levels, of which the best ``num_draft_tokens - 1``
  candidates are verified; SGLang fails at run time when fewer candidates exist, the embedded
  engine refuses such a combination at launch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from perfgate.engines.embedded.tree import capacity
from perfgate.errors import ConfigError

# SGLang's automatic choice for a LlamaForCausalLM target (a tree); (3, 1, 4) for most others.
AUTO_NUM_STEPS, AUTO_TOPK, AUTO_NUM_DRAFT_TOKENS = 5, 4, 8
CHAIN_ADJUSTED = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpecParams:
    num_steps: int  # levels of drafting per cycle
    topk: int  # branches per level; 1 drafts a chain
    num_draft_tokens: int  # tokens per verify pass, the root included: num_steps + 1 for a chain

    @property
    def lookahead(self) -> int:
        """Cache slots a sequence may use past its last output token's position.

        A finished sequence keeps running with the batch: its length may stand up to
        num_steps past its last output, and then the verify writes num_draft_tokens slots and
        the draft its scratch slots (one level per step, topk beams each) past it.
        """
        scratch = 1 + (self.num_steps - 1) * self.topk
        return self.num_steps + max(self.num_draft_tokens, self.num_steps + 1, scratch) + 1


def resolve_spec_params(
    num_steps: int | None, topk: int | None, num_draft_tokens: int | None
) -> SpecParams:
    """Apply SGLang's rules; raise ConfigError naming the flags to fix."""
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            raise ConfigError(
                "--speculative-eagle-topk and --speculative-num-draft-tokens need "
                "--speculative-num-steps too (SGLang asserts all three are unset, or chooses "
                "none of them)",
                fix="set all three, e.g. --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4",
            )
        return SpecParams(AUTO_NUM_STEPS, AUTO_TOPK, AUTO_NUM_DRAFT_TOKENS)
    topk = 1 if topk is None else topk
    _check_positive(num_steps, "--speculative-num-steps")
    _check_positive(topk, "--speculative-eagle-topk")
    if topk == 1:
        if num_draft_tokens is not None and num_draft_tokens != num_steps + 1:
            logger.warning(CHAIN_ADJUSTED)
        return SpecParams(num_steps, 1, num_steps + 1)
    if num_draft_tokens is None:
        raise ConfigError(
            f"is required with --speculative-eagle-topk {topk} (a tree verifies the best "
            "num_draft_tokens - 1 candidates)",
            field="--speculative-num-draft-tokens",
            fix=f"e.g. --speculative-num-draft-tokens {min(8, capacity(num_steps, topk))}",
        )
    _check_positive(num_draft_tokens, "--speculative-num-draft-tokens")
    most = capacity(num_steps, topk)
    if num_draft_tokens > most:
        raise ConfigError(
            f"{num_draft_tokens} with --speculative-num-steps {num_steps} and "
            f"--speculative-eagle-topk {topk}: a draft tree holds topk + (num_steps - 1)·topk² "
            f"= {most - 1} candidates, so at most {most} tokens (the root included) to verify",
            field="--speculative-num-draft-tokens",
            fix=f"use at most {most}, or more steps or a larger topk",
        )
    return SpecParams(num_steps, topk, num_draft_tokens)


def _check_positive(value: int, flag: str) -> None:
    if value < 1:
        raise ConfigError(f"must be at least 1, got {value}", field=flag)
