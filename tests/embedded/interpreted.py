"""Checks of the Triton kernels (attention, folded norms) that run under Triton's interpreter, in a child process.

TRITON_INTERPRET=1 must be set before Triton is first imported (Triton's own helpers are
defined then), so ``test_triton_attention`` and ``test_folded_norms`` run these in a
``python -m`` child with it set: ``python -m tests.embedded.interpreted NAME...`` runs each
check NAME in turn, in one process (one start of Python, torch and Triton for them all), and
prints a line of JSON for each, ``{"check": NAME, "error": null}`` when it holds or the
traceback when it does not (``run_checks`` reads them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from perfgate.engines.embedded import triton_attention
from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.drafters import Eagle3Drafter
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.model import (
    AttentionView,
    KVCache,
    RMSNorm,
    TargetConfig,
    Transformer,
    causal_view,
    fold_norms,
    fuse_projections,
    init_weights,
    use_attention_backend,
)
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker

from ..hang import HANG_S
from . import interpreter_waste
from .common import CPU, DRAFT, TARGET, requests, server_env

# The decoding checks' batch: ragged (a prompt padded, one of a single token), and short. The
# interpreter runs a kernel's programs one by one, a few milliseconds each, and norm_rope has
# one per token, head and layer: the shared PROMPTS (43 tokens the longest) and 24 new tokens
# made one check take 150 s of CPU time.
SHORT_PROMPTS: tuple[list[int], ...] = (list(b"Hello"), [7])
NEW_TOKENS = 10  # prefills, decode steps, and several draft-and-verify cycles
INTERPRETED_ROWS = 2  # the sequences of the layer checks' forwards: two rows, not one


def _additive(seen: Tensor) -> Tensor:
    return torch.full(seen.shape, float("-inf")).masked_fill_(seen, 0.0)


def _case(batch: int, heads: int, queries: int, slots: int, dim: int, seed: int) -> list[Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, queries, dim, generator=generator)
    # The cache holds more rows and slots than a forward reads, as the engine's does.
    k, v = (torch.randn(batch + 1, heads, slots + 40, dim, generator=generator) for _ in "kv")
    return [q, k, v]


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    rows, slots = q.shape[0], mask.shape[-1]
    out = F.scaled_dot_product_attention(
        q, k[:rows, :, :slots], v[:rows, :, :slots], attn_mask=mask
    )
    return out.transpose(1, 2)  # [B, T, H, D], the kernel's layout


def attends_as_sdpa() -> None:
    """Causal masks (decode, a bucket cut short, a verify, two blocks of queries) and a tree
    mask that differs per head."""
    for queries, slots in [(1, 256), (1, 100), (4, 128), (20, 64)]:
        q, k, v = _case(2, 3, queries, slots, 32, seed=queries)
        ends = torch.tensor([[slots - queries + t for t in range(queries)], list(range(queries))])
        mask = _additive(torch.arange(slots).view(1, 1, 1, -1) <= ends.view(2, 1, queries, 1))
        torch.testing.assert_close(triton_attention.attend(q, k, v, mask), _sdpa(q, k, v, mask))
    q, k, v = _case(2, 2, 5, 128, 16, seed=7)
    seen = torch.rand(2, 2, 5, 128, generator=torch.Generator().manual_seed(8)) < 0.3
    seen[..., 0] = True  # every node sees its sequence's first slot
    mask = _additive(seen)
    torch.testing.assert_close(triton_attention.attend(q, k, v, mask), _sdpa(q, k, v, mask))


def blind_query_gets_zeros() -> None:
    """A query that sees no slot gets zeros (SDPA gives NaN), the others are unaffected, in one
    loop step and over four (three of which the second query sees nothing of)."""
    for slots in (64, 256):
        q, k, v = _case(1, 2, 2, slots, 16, seed=3)
        seen = torch.zeros(1, 1, 2, slots, dtype=torch.bool)
        seen[0, 0, 1, :10] = True
        out = triton_attention.attend(q, k, v, _additive(seen))
        assert torch.equal(out[0, 0], torch.zeros(2, 16)), out[0, 0]
        torch.testing.assert_close(out[:, 1:], _sdpa(q, k, v, _additive(seen))[:, 1:])


def decoding_unchanged() -> None:
    """The shipped tiny models decode the same tokens on both backends, plain and EAGLE-3:
    prefills, decode steps, the draft's steps and the verifies all attend through the kernel."""
    outputs = {}
    for backend in ("torch_native", "triton"):
        target = load_target(TARGET, CPU, torch.float32)
        head = load_draft(DRAFT, target, CPU, torch.float32)
        for model in (target, head):
            use_attention_backend(model, backend)
        outputs[backend] = _decode(target, head)
    assert outputs["triton"] == outputs["torch_native"], outputs
    plain_ids, spec_ids = outputs["triton"]
    assert spec_ids == plain_ids and all(len(ids) == NEW_TOKENS for ids in plain_ids), outputs


def _decode(target: Transformer, head: Any) -> tuple[list[list[int]], list[list[int]]]:
    """The tokens the target decodes from SHORT_PROMPTS alone and with head as its EAGLE-3 draft."""
    plain = PlainWorker(target).generate(requests(SHORT_PROMPTS, NEW_TOKENS))
    drafter = Eagle3Drafter(head, 1, GraphRunner("off"))
    spec = EagleWorker(target, drafter, SpecParams(3, 1, 4))
    cycles = spec.generate(requests(SHORT_PROMPTS, NEW_TOKENS))
    return [g.output_ids for g in plain], [g.output_ids for g in cycles]


def _folded_pair(backend: str) -> tuple[Transformer, Transformer]:
    """The tiny target twice with its projections stacked, the second with its norms folded;
    caches of INTERPRETED_ROWS rows."""
    pair = []
    for fold in (False, True):
        target = load_target(TARGET, CPU, torch.float32)
        target.setup_cache(INTERPRETED_ROWS, 256)
        fuse_projections(target)
        use_attention_backend(target, backend)
        if fold:
            assert fold_norms(target) == target.config.n_layer
        pair.append(target)
    return pair[0], pair[1]


def _compare(expected: Transformer, got: Transformer, view_of: Any, rows: int = 3) -> None:
    """A prefill, a decode step and a verify of rows sequences: logits, the captured hidden
    states and the caches' keys and values alike."""
    for length, start in ((7, 0), (1, 7), (4, 8)):
        generator = torch.Generator().manual_seed(length)
        tokens = torch.randint(0, 256, (rows, length), generator=generator)
        positions = torch.arange(start, start + length).expand(rows, length)
        with torch.inference_mode():
            mine = got(tokens, positions, view_of(positions), capture=(0, 1, 2))
            theirs = expected(tokens, positions, view_of(positions), capture=(0, 1, 2))
        torch.testing.assert_close(mine[0], theirs[0], rtol=0, atol=1e-4)
        for a, b in zip(mine[1], theirs[1], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(got.modules(), expected.modules(), strict=True):
        if isinstance(a, KVCache) and isinstance(b, KVCache):
            torch.testing.assert_close(a.k, b.k, rtol=0, atol=1e-5)
            torch.testing.assert_close(a.v, b.v, rtol=0, atol=1e-5)


def folded_norms_compute_the_unfolded_layers() -> None:
    """Folded, through norm_rope and norm_silu: a causal view on the torch_native backend, a
    per-head tree view on the triton one, and compiled (``compile_layers``) a causal view on
    the triton one."""
    rows = INTERPRETED_ROWS
    _compare(*_folded_pair("torch_native"), lambda positions: causal_view(positions, 128), rows)

    def tree(positions: Tensor) -> AttentionView:  # each head sees its own half of the prefix
        view = causal_view(positions, 128)
        shape = (rows, 4, positions.shape[1], 128)
        seen = view.mask.expand(rows, 4, -1, -1) & (
            torch.rand(shape, generator=torch.Generator().manual_seed(5)) < 0.5
        )
        seen[..., 0] = True
        return AttentionView(view.slots, seen)

    unfolded, folded = _folded_pair("triton")
    _compare(unfolded, folded, tree, rows)
    unfolded, compiled = _folded_pair("triton")
    compile_layers(compiled)
    _compare(unfolded, compiled, lambda positions: causal_view(positions, 128), rows)


def folded_odd_heads_compute_the_unfolded_layers() -> None:
    """Heads of 24 entries, not a power of 2 (Triton's ranges are): norm_rope takes them in
    blocks of 32 with the rest masked off, and the folded layers compute the same (on the
    torch_native backend: the triton attention kernel takes powers of 2 only)."""
    config = TargetConfig(n_layer=2, dim=96, n_head=4, ffn_dim=192, max_seq_len=256)
    pair = []
    for fold in (False, True):
        target = Transformer(config)
        init_weights(target, seed=3)
        with torch.no_grad():
            for module in target.modules():
                if isinstance(module, RMSNorm):
                    module.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(4))
        target.setup_cache(INTERPRETED_ROWS, 256)
        fuse_projections(target)
        use_attention_backend(target, "torch_native")
        if fold:
            assert fold_norms(target) == 2
        pair.append(target)
    _compare(pair[0], pair[1], lambda positions: causal_view(positions, 128), INTERPRETED_ROWS)


def folded_decoding_unchanged() -> None:
    """The shipped tiny models decode the same tokens folded and not, plain and EAGLE-3.

    Attention on the torch_native backend, so that only the folded side runs kernels under the
    interpreter: decoding_unchanged shows the triton backend decodes as torch_native does, and
    folded_norms_compute_the_unfolded_layers the folded layers on the triton backend."""
    outputs = []
    for fold in (False, True):
        target = load_target(TARGET, CPU, torch.float32)
        head = load_draft(DRAFT, target, CPU, torch.float32)
        for model in (target, head):
            fuse_projections(model)
            use_attention_backend(model, "torch_native")
        if fold:
            assert fold_norms(target) == target.config.n_layer
        outputs.append(_decode(target, head))
    assert outputs[0] == outputs[1], outputs
    assert outputs[1][0] == outputs[1][1], outputs


CHECKS = {f.__name__: f for f in (attends_as_sdpa, blind_query_gets_zeros, decoding_unchanged)}
FOLDED_CHECKS = {
    f.__name__: f
    for f in (  # the one that compiles last, in a child that runs several
        folded_odd_heads_compute_the_unfolded_layers,
        folded_decoding_unchanged,
        folded_norms_compute_the_unfolded_layers,
    )
}


def assert_checks_hold(names: Sequence[str]) -> None:
    """Run the named checks in one child under Triton's interpreter; fail naming each check
    that did not hold, with its traceback (or the child's stderr, where it died first)."""
    failed = {name: error for name, error in run_checks(names).items() if error}
    assert not failed, "\n\n".join(f"{name}:\n{error}" for name, error in failed.items())


def run_checks(names: Sequence[str]) -> dict[str, str]:
    """Run the named checks in one child under Triton's interpreter; return each check's
    error: "" where it held, its traceback where it failed, and the child's stderr for a
    check the child never reported on (it died first)."""
    env = {**server_env(), "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "tests.embedded.interpreted", *names]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_S)
    reported = {}
    for line in done.stdout.splitlines():
        if line.startswith('{"check": '):
            result = json.loads(line)
            reported[result["check"]] = result["error"] or ""
    died = f"no result (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return {name: reported.get(name, died) for name in names}


def _main(names: Sequence[str]) -> int:
    """Run each named check in turn, printing its result (see the module's doc); exit 0 when
    all held."""
    torch.set_num_threads(1)
    interpreter_waste.skip()  # the same numbers, in about half the time
    every = {**CHECKS, **FOLDED_CHECKS}
    failed = 0
    for name in names:
        error = None
        try:
            every[name]()
        except Exception:
            error = traceback.format_exc()[-3000:]
            failed += 1
        print(json.dumps({"check": name, "error": error}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
