"""Are a tensor-parallel server's outputs the single-device ones? The every-token rule, TP1 vs TPn.

    python benchmarks/tp_equivalence.py --one embedded-large-gpu --many embedded-large-tp2 \
        [--config perfgate.toml] [--max-new-tokens 256] [--out FILE.md]

Starts the plain server of `--many` (tensor-parallel) and generates greedily, then the plain
server of `--one` (one device), which generates too and scores the tensor-parallel outputs by
teacher forcing (perfgate.teacher). The outputs are then judged by the equivalence rule a gate
run uses (perfgate.equivalence.compare_outputs, the `--one` scenario's near-tie margin): the
tensor-parallel side in the role of the speculative server. Prints (and writes, with --out) the
summary: prompts identical, tokens compared, near-tie positions with their margins, failing
positions. Exit code 0 when the outputs are equivalent, 1 when not, 64 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfgate.config import Scenario, load_config
from perfgate.engines.client import EngineClient
from perfgate.engines.launch import free_port
from perfgate.engines.server_commands import server_command
from perfgate.equivalence import EquivalenceReport, compare_outputs
from perfgate.errors import PerfgateError
from perfgate.measure import server_and_client
from perfgate.preflight import preflight
from perfgate.probe import DIR_VARIABLE
from perfgate.teacher import score_outputs


def generate(scenario: Scenario, max_new_tokens: int, folder: Path) -> list[tuple[int, ...]]:
    with _plain_server(scenario, folder) as client:
        return [c.output_ids for c in client.generate(scenario.prompts, max_new_tokens)]


def judge(
    one: Scenario, many_outputs: list[tuple[int, ...]], max_new_tokens: int, folder: Path
) -> EquivalenceReport:
    with _plain_server(one, folder) as client:
        own = [c.output_ids for c in client.generate(one.prompts, max_new_tokens)]
        scores = score_outputs(client, one.prompts, many_outputs)
    return compare_outputs(
        many_outputs,
        own,
        teacher=scores,
        near_tie_margin=one.near_tie_margin,
        max_near_tie_share=one.max_near_tie_share,
    )


@contextmanager
def _plain_server(scenario: Scenario, folder: Path) -> Iterator[EngineClient]:
    """The scenario's plain server (no probe), checked as a gate run checks it, and a client."""
    checked = preflight(scenario)
    command = server_command(
        scenario, "plain", port=free_port(), extra_env={DIR_VARIABLE: ""}, sglang=checked.sglang
    )
    log = folder / f"{scenario.name}.log"
    with server_and_client(scenario, command, log, checked) as (_, client):
        yield client


def report(one: Scenario, many: Scenario, tokens: int, result: EquivalenceReport) -> str:
    lines = [
        f"# {many.name} (tp {many.tp}) against {one.name} (tp {one.tp}): every-token rule",
        "",
        f"{len(one.prompts)} prompts, {tokens} new tokens each, greedy, plain servers; near-tie "
        f"margin {one.near_tie_margin} nats. The tensor-parallel outputs are scored by teacher "
        f"forcing on the one-device server.",
        "",
        f"- equivalent: {'yes' if result.ok else 'no'}",
        f"- {result.summary()}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", required=True, help="the one-device scenario")
    parser.add_argument("--many", required=True, help="the tensor-parallel scenario")
    parser.add_argument("--config", default=None, help="perfgate.toml (default: found here)")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the summary here too")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        one, many = config.select([args.one, args.many])
        if one.prompts != many.prompts:
            print("the two scenarios must have the same prompts", file=sys.stderr)
            return 64
        tokens = args.max_new_tokens or one.max_new_tokens
        with tempfile.TemporaryDirectory(prefix="tp-equivalence-") as work:
            outputs = generate(many, tokens, Path(work))
            result = judge(one, outputs, tokens, Path(work))
    except PerfgateError as error:
        print(f"tp_equivalence: {error}", file=sys.stderr)
        return int(error.exit_code)
    text = report(one, many, tokens, result)
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
