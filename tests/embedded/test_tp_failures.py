"""A rank that dies after start-up ends `perfgate run` within seconds, with exit 69 naming the
rank, how it ended and its last lines, and leaves no process behind.

`perfgate run` over gloo with the tiny models and one torch thread; a rank of its first server
(the speculative one: no plain server starts after it) ends itself through the embedded
engine's `--debug-rank-exit` (SIGKILL or an exit code) during perfgate's warm-up, during a
repeat, or between two repeats. A few representative cases: the loop over
every case, many times, is benchmarks/rank_failures.py (its record:
benchmarks/results/rank-failures-cpu.md), whose harness this uses.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from perfgate.engines.embedded import ranks
from perfgate.engines.processes import iter_processes

from ..conftest import REPO
from ..hang import HANG_S

sys.path.insert(0, str(REPO / "benchmarks"))
import rank_failures

pytestmark = pytest.mark.slow

LIMIT_S = 10.0
# The harness scans /proc for the run's processes every SCAN_S (0.2 s): each scan reads every
# process's environment, 5-10 ms of this process's CPU on a machine of 100 processes, a
# second's worth over a run. Twice a second still finds the rank seconds before it dies (it
# imports torch and loads its shards first) and every process group of the run (each lives
# for seconds); the rank's death is still polled every 10 ms.
SCAN_S = 0.5


def _args() -> argparse.Namespace:
    return argparse.Namespace(
        model="perfgate/llama-tiny",
        draft="perfgate/eagle3-llama-tiny",
        device="cpu",
        extra_arg=[],
        # A batch the faults count is one however long (a rank ends after its prefill or after
        # it) and no figure is read: a few tokens do.
        max_new_tokens=4,
        sigkill_max_new_tokens=48,
        timeout_s=HANG_S,
        server="spec",
    )


@pytest.mark.parametrize(
    ("case", "phase", "status"),
    [
        ("tp2-warmup-kill", "warmup 1 of 1", "was killed by SIGKILL (signal 9)"),
        ("tp2-repeat-exit", "repeat 2 of 3", "exited with code 134"),
        ("tp4-between-kill", "repeat 2 of 3", "was killed by SIGKILL (signal 9)"),
    ],
)
def test_a_rank_that_dies_ends_the_run_fast_naming_it(
    case: str, phase: str, status: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank_failures, "SCAN_S", SCAN_S)
    chosen = rank_failures.parse_case(case)
    outcome = rank_failures.run_case(chosen, 1, _args(), tmp_path)
    (output,) = tmp_path.glob("*/output.txt")
    text = output.read_text(errors="replace")
    assert outcome.exit_code == 69, text
    assert "perfgate exit code: 69" in text
    assert outcome.death_to_exit_s is not None and outcome.death_to_exit_s <= LIMIT_S, text
    rank, tp = chosen.rank, chosen.tp
    assert re.search(
        rf"the spec server of scenario 'soak' ended while perfgate used it: rank {rank} of "
        rf"{tp} \(pid {outcome.rank_pid}\) {re.escape(status)} after start-up",
        text,
    ), text
    where = "after" if chosen.when == "between" else "in"
    assert f"  [rank {rank}] ending rank {rank} {where} batch " in text  # its last line, quoted
    assert f"soak spec: failed at {phase}" in text  # where perfgate was
    # Nothing left: in any process group seen during the run, or carrying the run's tag.
    assert outcome.left == [], outcome.left
    assert [
        p.pid for p in iter_processes() if (p.environ or {}).get("PERFGATE_SOAK_TAG") == outcome.tag
    ] == []


class _Ended:
    """A rank as first_to_end reads it: its number and how it ended (when, return code)."""

    def __init__(self, rank: int, ended: tuple[float, int] | None) -> None:
        self.rank, self.ended = rank, ended


def test_the_rank_a_signal_ended_is_named_over_a_peer_that_failed_with_it() -> None:
    """The tp4 case CI once saw: rank 3 was killed, rank 1's collective then failed (exit 1),
    and the load had rank 1's exit seen 0.1 s first. The killed rank is the cause."""
    killed, peer, running = _Ended(3, (10.1, -9)), _Ended(1, (10.0, 1)), _Ended(2, None)
    first = ranks.first_to_end([peer, killed, running])  # type: ignore[list-item]
    assert first is killed
    # A signal long after the first exit is not what ended it; nor is anything while all run.
    late = _Ended(3, (10.0 + ranks.TOGETHER_S + 1.0, -9))
    assert ranks.first_to_end([peer, late]) is peer  # type: ignore[list-item]
    assert ranks.first_to_end([running]) is None  # type: ignore[list-item]
