"""A rank of a ``--tp-size N`` server, started by rank 0 (``ranks.py``), never by hand.

python -m perfgate.engines.embedded.rank RANK WORLD PORT PARENT_PID SERVER_FLAGS...
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from perfgate.engines.embedded.ranks import die_with_parent
from perfgate.errors import PerfgateError

if TYPE_CHECKING:  # args imports torch, which waits until the watchdog is up
    from perfgate.engines.embedded.args import RankExit


def main(argv: Sequence[str]) -> int:
    """Run rank RANK of WORLD: join the group at PORT, load its shards, follow rank 0."""
    rank, world, port, parent_pid = (int(value) for value in argv[:4])
    die_with_parent(parent_pid)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Imported once the watchdog is up: torch takes seconds to import.
    from perfgate.engines.embedded.args import check_args, parse_args
    from perfgate.engines.embedded.engine import build_worker
    from perfgate.engines.embedded.parallel import follow

    args = parse_args(argv[4:])
    # The server marks each line this rank writes with its rank (ranks.Rank).
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s] %(message)s")
    worker, group = build_worker(args, check_args(args), rank=rank, port=port)
    assert group is not None and group.world == world
    fault = args.debug_rank_exit
    follow(EndsItself(worker, fault) if fault is not None and fault.rank == rank else worker, group)
    return 0


class EndsItself:
    """A rank's worker that ends the rank in the batch ``--debug-rank-exit`` names: a crash on
    purpose, to test what the server and perfgate make of one."""

    def __init__(self, worker: Any, fault: RankExit) -> None:
        self.worker = worker
        self.target = worker.target
        self.fault = fault
        self.batches = 0

    def generate(
        self, requests: Sequence[Any], on_step: Callable[[Any], None] | None = None
    ) -> Any:
        self.batches += 1
        if self.batches != self.fault.batch:
            return self.worker.generate(requests, on_step)
        if self.fault.where == "in":  # after the batch's prefill: its collectives half done
            return self.worker.generate(requests, lambda _batch: self.end())
        generations = self.worker.generate(requests, on_step)
        self.end()
        return generations

    def end(self) -> None:
        fault = self.fault
        how = "SIGKILL" if fault.code is None else f"exit code {fault.code}"
        print(
            f"ending rank {fault.rank} {fault.where} batch {fault.batch} by {how}, "
            "as --debug-rank-exit asks",
            flush=True,
        )
        if fault.code is None:
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(fault.code or 0)


def _exit_code(argv: Sequence[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse: its message is written already
        return stop.code if isinstance(stop.code, int) else 1
    except PerfgateError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except BaseException:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    # Without interpreter finalisation, as the server ends: the watchdog thread may be reading.
    code = _exit_code(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
