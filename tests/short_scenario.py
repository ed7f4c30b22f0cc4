"""The tiny scenario measured in one timed repeat and no warm-up.

For the tests of what a run does around its measurement (which copy of perfgate it imports,
where its record goes, which server starts first), not of its figures: each repeat or warm-up
is one more generation of both prompts on each of the two servers, work no such test reads.
"""

from __future__ import annotations

from .conftest import TINY_SCENARIO

SHORT_SCENARIO = TINY_SCENARIO.replace("repeats = 3", "repeats = 1").replace(
    "warmup = 1", "warmup = 0"
)
assert SHORT_SCENARIO.count("repeats = 1") == SHORT_SCENARIO.count("warmup = 0") == 1
