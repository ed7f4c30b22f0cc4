"""Does a short chain accept what the long chain's depths say? The plan's acceptance model, checked
cycle by cycle on the embedded engine.

    python benchmarks/accept_context.py                      # CPU, the tiny models, 1-3 against 6
    python benchmarks/accept_context.py --steps 1,2,3,5 --profiled 10 --device cuda \\
        --model perfgate/llama-large --draft perfgate/eagle3-llama-large --dtype bfloat16

perfgate plan (perfgate/plan/forecast.py) predicts a chain of ``k`` steps from one run at ``N``:
a cycle at ``k`` accepts ``min(d, k)`` where a cycle at ``N`` accepted ``d``, each cycle drawn
from the sequence's depths independently of the one before. This decodes the default prompts
greedily (as the default scenario does, in-process: no server) at every step count asked and at
the profiled one, records every cycle's accepted drafts per sequence, and prints per ``k``:

- the accept length measured (SGLang's, completion tokens over verify passes) and per cycle;
- what the model says from the profiled run's depths (``1 + mean min(d, k)``);
- the chance that a cycle accepts all ``k`` drafts after a cycle that did, and after one that
  did not: where they differ, cycles are not independent, and a chain that stops at ``k`` on
  a fully accepted stretch starts its next cycle in the same stretch, where the long chain's
  next cycle starts after the draft that failed;
- the chance that the first draft is accepted after a full cycle and after a failed one.

Exit code: 0, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.engines.embedded.batch import Request
from perfgate.engines.embedded.drafters import Eagle3Drafter
from perfgate.engines.embedded.evaluate import (
    default_prompt_ids,
    evaluation_prompt_ids,
    mean_accept_length,
)
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.worker import Accepted, EagleWorker

Depths = dict[int, list[int]]  # per batch row, the drafts each cycle accepted


def decode(worker: EagleWorker, requests: Sequence[Request]) -> tuple[float, Depths]:
    """The accept length of one greedy batch, and every cycle's accepted drafts per row."""
    depths: Depths = defaultdict(list)
    accept = worker.accept

    def recording(*args: object, **kwargs: object) -> Accepted:
        accepted = accept(*args, **kwargs)  # type: ignore[arg-type]
        for row, drafts in zip(accepted.rows, accepted.drafts, strict=True):
            depths[row].append(drafts)
        return accepted

    worker.accept = recording  # type: ignore[method-assign]
    return mean_accept_length(worker.generate(requests)), dict(depths)


def after(depths: Depths, k: int, event: int) -> tuple[float, float, int, int]:
    """P(a cycle accepts at least `event` drafts) after a full cycle (all k) and after a
    failed one, with how many cycles each figure rests on."""
    counts = {True: [0, 0], False: [0, 0]}
    for row in depths.values():
        for previous, current in pairwise(row):
            seen = counts[previous == k]
            seen[0] += 1
            seen[1] += current >= event
    full, failed = counts[True], counts[False]
    return (
        full[1] / full[0] if full[0] else float("nan"),
        failed[1] / failed[0] if failed[0] else float("nan"),
        full[0],
        failed[0],
    )


def table(measured: dict[int, tuple[float, Depths]], profiled: int) -> list[str]:
    lines = [
        f"| k | accept length | per cycle | from the {profiled}-step run's depths | error | "
        "P(all k) after a full cycle / after a failed one | P(first draft) after full / failed |",
        "| ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    long_depths = [d for row in measured[profiled][1].values() for d in row]
    for k, (accept, depths) in sorted(measured.items()):
        per_cycle = 1 + statistics.fmean(d for row in depths.values() for d in row)
        model = 1 + statistics.fmean(min(d, k) for d in long_depths)
        full, failed, n_full, n_failed = after(depths, k, k)
        first_full, first_failed, _, _ = after(depths, k, 1)
        lines.append(
            f"| {k} | {accept:.4f} | {per_cycle:.4f} | {model:.4f} | {model / per_cycle - 1:+.1%} "
            f"| {full:.3f} ({n_full}) / {failed:.3f} ({n_failed}) "
            f"| {first_full:.3f} / {first_failed:.3f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1,2,3", help="chain lengths to check, e.g. 1,2,3")
    parser.add_argument("--profiled", type=int, default=6, help="the long chain's steps")
    parser.add_argument("--model", default="perfgate/llama-tiny")
    parser.add_argument("--draft", default="perfgate/eagle3-llama-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--prompts",
        default="default",
        choices=["default", "evaluation"],
        help="default: the default scenario's 8; evaluation: train.py's 64 others",
    )
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    try:
        steps = sorted({int(s) for s in args.steps.split(",")})
    except ValueError:
        parser.error(f"--steps {args.steps}: comma-separated whole numbers, e.g. 1,2,3")
    if not steps or steps[0] < 1 or steps[-1] >= args.profiled:
        parser.error(f"--steps {args.steps}: each from 1 to below --profiled {args.profiled}")
    if args.device == "cpu":
        torch.set_num_threads(1)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    started = time.perf_counter()
    target = load_target(args.model, device, dtype)
    head = load_draft(args.draft, target, device, dtype)
    prompts = default_prompt_ids() if args.prompts == "default" else evaluation_prompt_ids()
    requests = [Request(prompt, args.max_new_tokens) for prompt in prompts]
    measured = {
        k: decode(EagleWorker(target, Eagle3Drafter(head), SpecParams(k, 1, k + 1)), requests)
        for k in [*steps, args.profiled]
    }
    lines = [
        f"# Acceptance cycle by cycle: {args.model} with {args.draft}",
        "",
        f"{len(requests)} {args.prompts} prompts, {args.max_new_tokens} new tokens each, greedy, "
        f"{args.device} {args.dtype}, torch {torch.__version__}; "
        f"{time.perf_counter() - started:.0f} s. Error: the model over the measured per cycle.",
        "",
        *table(measured, args.profiled),
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
