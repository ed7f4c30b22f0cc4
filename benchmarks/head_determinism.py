"""Does the EAGLE-3 head train the same twice? The draft phase's first steps, run twice from
the same seeds under each attention backend, on one device.

    python benchmarks/head_determinism.py --device cuda --size large --steps 30   # one GPU
    python benchmarks/head_determinism.py                                         # CPU, tiny

The head's masked attention trains on PyTorch's math backend (perfgate/engines/embedded/
losses.py, HEAD_ATTENTION) because CUDA's memory-efficient backward is not deterministic: seven
trainings of the large models on lent H200s ended their heads 0.48037-0.48247 in loss while
their targets agreed to the last digit. This measures both on the machine at hand: per backend
(`math`, what training uses; `efficient`, CUDA's memory-efficient kernels, what PyTorch chose
before; CUDA only), two runs of the draft phase over a target built from its config's seed (no
trained weights: the question is whether a run repeats, not how good it is), in bf16 autocast on
CUDA as training runs, each run's last loss and a digest of the head's weights after it. The
table says whether the two runs agree bit for bit and by how much their losses part.

Exit code: 0 when the math backend's two runs agree bit for bit, 1 when they do not, 2 on a
bad argument.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

from perfgate.engines.embedded import losses, train
from perfgate.engines.embedded.corpus import Corpus
from perfgate.engines.embedded.recipes import RECIPES

BACKENDS = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def head_run(
    size: str, device: torch.device, steps: int, backend: SDPBackend, corpus: Corpus
) -> tuple[list[float], str]:
    """One run of the draft phase's first `steps`: its losses and the head's weights' digest."""
    recipe = RECIPES[size]
    target_config, draft_config = train.model_configs(recipe)
    target = train.build_target(config=target_config, device=device)  # fp32, as training's
    head = train.build_draft(target, draft_config)
    spec = replace(recipe.phase("draft"), steps=steps)
    sources = train.sources_of(corpus, spec)
    chosen, losses.HEAD_ATTENTION = losses.HEAD_ATTENTION, backend
    try:
        found = train.run_draft_phase(head, target, spec, sources, autocast=device.type == "cuda")
    finally:
        losses.HEAD_ATTENTION = chosen
    digest = hashlib.sha256()
    for name, weight in sorted(head.state_dict().items()):
        digest.update(name.encode())
        digest.update(weight.detach().float().cpu().numpy().tobytes())
    return found, digest.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(RECIPES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3, help="draft-phase steps a run takes")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: one step or more")
    device = torch.device(args.device)
    names = ["math", "efficient"] if device.type == "cuda" else ["math"]
    rows = [
        f"# Does the {args.size} head train the same twice? {args.steps} draft steps on "
        f"{train.device_name(device)}, torch {torch.__version__}",
        "",
        "| attention | run 1 last loss | run 2 last loss | largest loss gap | weights 1 | "
        "weights 2 | same bits |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    corpus = train.load_training_corpus()
    same = {}
    for name in names:
        (first, one), (second, two) = (
            head_run(args.size, device, args.steps, BACKENDS[name], corpus) for _ in range(2)
        )
        gap = max(abs(a - b) for a, b in zip(first, second, strict=True))
        same[name] = first == second and one == two
        rows.append(
            f"| {name} | {first[-1]:.6f} | {second[-1]:.6f} | {gap:.2e} | {one} | {two} | "
            f"{'yes' if same[name] else 'no'} |"
        )
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if same["math"] else 1


if __name__ == "__main__":
    sys.exit(main())
