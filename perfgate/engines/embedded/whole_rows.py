"""Inductor's choices with a norm's row reduced in one pass, up to WHOLE_ROW elements.

A norm is a reduction over a row of the hidden size. Inductor keeps a row in registers (a
"persistent" reduction: one pass) only up to 1024 elements; past that it loops over the row
twice, once for the sum of squares and once more to scale it, each a chain of loads. At batch 8
a decode step's norms are 8 rows each, so such a kernel's time is its chain of loads, not its
bytes. ``compiling.whole_row_reductions`` installs these choices;
benchmarks/decode_bandwidth.py times the step both ways.

Imported only to compile: it imports Inductor.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import config
from torch._inductor.choices import InductorChoices
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.virtualized import V

WHOLE_ROW = 8192  # elements: the widest row reduced in one pass (the large model's is 2048)


class WholeRowChoices(InductorChoices):
    """Inductor's choices, with inner reductions of up to WHOLE_ROW elements persistent."""

    @staticmethod
    def should_use_persistent_reduction(features: Any, cooperative_reduction: bool) -> bool:
        if (
            config.triton.persistent_reductions
            and not cooperative_reduction
            and features.get_reduction_hint() == ReductionHint.INNER
            and V.graph.sizevars.statically_known_leq(features.reduction_numel, WHOLE_ROW)
        ):
            return True
        return InductorChoices.should_use_persistent_reduction(features, cooperative_reduction)

    def uuid(self) -> str:
        """Its part of Inductor's cache keys: code compiled with these choices is its own."""
        return f"perfgate.whole_rows.{WHOLE_ROW}"
