"""`perfgate ARGS` in a process of its own, its servers replaced by the sweep tests' stand-in.

    python tests/sweep/shard_worker.py sweep --shard 2/3 ...

(`stand_in_init` puts the stand-in in the test's own process, for a sweep run there.)

Everything but the servers is the real command: the grid, the shard's share, the history it
records to, the output. The stand-in's tok/s follow `curve` (steps and NCCL_PROTO); with
$HANG_AT set to a label (`steps=4 NCCL_PROTO=LL`), its speculative server writes
$HANG_MARKER and then never answers, so a test can kill the shard in the middle of it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfgate.cli import main
from perfgate.config import Scenario
from perfgate.results import ModeResult
from perfgate.sweep.run import SweepRunner
from tests.factories import mode_result


def curve(scenario: Scenario) -> float:
    """Peaks at 3 steps; NCCL_PROTO=Simple 20% slower throughout: best steps=3 with LL."""
    by_steps = {1: 110.0, 2: 125.0, 3: 140.0, 4: 120.0, 5: 110.0, 6: 100.0}[scenario.steps]
    return by_steps * (0.8 if scenario.env.get("NCCL_PROTO") == "Simple" else 1.0)


def servers(scenario: Scenario, mode: str, folder: Path, **_: Any) -> ModeResult:
    """measure_mode's stand-in: five clean repeats at the curve's tok/s (plain: 100)."""
    label = f"steps={scenario.steps} NCCL_PROTO={scenario.env.get('NCCL_PROTO')}"
    if mode == "spec" and label == os.environ.get("HANG_AT"):
        Path(os.environ["HANG_MARKER"]).write_text(label)
        while True:
            time.sleep(1)
    tok_s = 100.0 if mode == "plain" else curve(scenario)
    result = mode_result(mode, tok_s, repeats=5)
    repeats = tuple(tok_s * f for f in (0.998, 1.0, 1.002, 0.999, 1.001))
    return replace(result, samples={**result.samples, "output_tok_s": repeats})


def stand_in_init() -> Callable[..., None]:
    """SweepRunner.__init__ with `servers` as its measure: the stand-in, in this process."""
    original = SweepRunner.__init__

    def init(self: SweepRunner, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("measure", servers)
        original(self, *args, **kwargs)

    return init


if __name__ == "__main__":
    SweepRunner.__init__ = stand_in_init()  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
