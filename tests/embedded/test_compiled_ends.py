"""The compiled ends of a forward (``compile_layers``): before the first layer, the embedding,
the rotary tables at the positions and the causal mask; after the last, the argmax. Eagerly
they were seven kernels and PyTorch's argmax on an H200's decode step; compiled, one kernel
each, and on a GPU the embedding's three launch as one (Inductor's combo kernels; see
benchmarks/results/h200-real-weights.md).

No GPU here: Inductor writes Triton code for the CPU (``triton_kernels_written``), where it
does not combine kernels."""

from __future__ import annotations

import pytest

from .common import Compiling, Written, triton_kernels_written

COMPILE_THE_ENDS = """
from unittest import mock

import torch
from triton.runtime.interpreter import GridExecutor

from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.model import TargetConfig, Transformer


def refused(*args, **kwargs):
    raise RuntimeError("not run: only the code Inductor wrote is read")


model = Transformer(TargetConfig(dim=256, n_head=2, n_layer=1, ffn_dim=512))
model.setup_cache(8)
compile_layers(model)
tokens, positions = torch.randint(0, 256, (8, 1)), torch.full((8, 1), 200)
# Only the kernels' code is read, so Triton's interpreter is not let run them: the argmax's
# reduction, one jit helper's call for each pair of entries, took a second of the script's four.
with mock.patch.object(GridExecutor, "__call__", refused):
    for ends in (
        lambda: model.embed(tokens, positions, 256, model.rope_table(positions.device)),
        lambda: model.greedy(torch.randn(8, 1, 256)),
    ):
        try:
            ends()
        except RuntimeError:  # the kernels, refused once Inductor has written them
            pass
"""


@pytest.mark.slow
def test_a_decode_steps_compiled_ends_are_one_kernel_each(written: dict[str, Written]) -> None:
    kernels = written["ends"].checked()

    assert len(kernels) == 4, kernels
    embedding, rope, mask, argmax = (
        [k for k in kernels if all(part in k for part in parts)]
        for parts in (("embedding",), ("index",), ("le", "masked_fill"), ("argmax",))
    )
    # The causal mask's comparison and its conversion to an additive mask are one kernel.
    assert len(embedding) == len(rope) == len(mask) == len(argmax) == 1, kernels


@pytest.mark.slow
def test_the_embedding_is_compiled_with_combo_kernels_in_the_default_mode_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from perfgate.engines.embedded.compiling import compile_layers
    from perfgate.engines.embedded.model import TargetConfig, Transformer

    compiled: dict[str, dict[str, object]] = {}
    real_compile = torch.compile

    def recording(fn, **kwargs):  # type: ignore[no-untyped-def]
        compiled[getattr(fn, "__name__", type(fn).__name__)] = kwargs
        return real_compile(fn, **kwargs)  # raises where mode and options are both given

    monkeypatch.setattr(torch, "compile", recording)
    model = Transformer(TargetConfig(n_layer=1))
    compile_layers(model)
    assert compiled["embed"]["options"] == {"combo_kernels": True}
    assert compiled["finish"]["options"] is None

    compile_layers(model, mode="max-autotune-no-cudagraphs")  # no options beside a mode
    assert compiled["embed"] == {"mode": "max-autotune-no-cudagraphs", "options": None}


COMBINED_EMBEDDING = """
import torch
from torch._inductor.scheduler import ForeachKernelSchedulerNode

from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.model import TargetConfig, Transformer, causal_view


def every_node_in_one_group(scheduler):  # Inductor leaves a CPU's nodes out of its groups
    return [[node for group in scheduler._topological_sort_nodes() for node in group]]


ForeachKernelSchedulerNode.set_group_algorithm_for_combo_kernels(every_node_in_one_group)
model = Transformer(TargetConfig(dim=256, n_head=2, n_layer=1, ffn_dim=512)).to(torch.bfloat16)
eager = Transformer.embed
compile_layers(model)
torch.manual_seed(0)
with torch.inference_mode():
    # A server's shapes: decode, then longer caches (kv_len becomes symbolic), verify, prefill.
    for tokens, kv_len in ((1, 256), (1, 384), (4, 384), (7, 512)):
        ids = torch.randint(0, 256, (8, tokens))
        positions = torch.randint(0, kv_len - tokens, (8, 1)) + torch.arange(tokens)
        table = model.rope_table(positions.device)
        got = model.embed(ids, positions, kv_len, table)
        want = eager(model, ids, positions, causal_view(positions, kv_len), table)
        pairs = [(got[0], want[0]), (got[1].cos, want[1].cos), (got[1].sin, want[1].sin),
                 (got[2].mask, want[2].mask)]
        assert all(torch.equal(a, b) for a, b in pairs), (tokens, kv_len)
print("equal")
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Written]:
    """What COMPILE_THE_ENDS and COMBINED_EMBEDDING compiled, in one child (one start of
    Python, torch, Inductor and Triton), each with its own cache directory. COMBINED_EMBEDDING
    last: the grouping of combo kernels it sets is the process's."""
    folder = tmp_path_factory.mktemp("compiled_ends")
    names = ("ends", "combined")
    jobs = (
        Compiling(COMPILE_THE_ENDS, folder / "ends"),
        Compiling(COMBINED_EMBEDDING, folder / "combined"),
    )
    return dict(zip(names, triton_kernels_written(*jobs), strict=True))


@pytest.mark.slow
def test_the_combined_embedding_kernel_computes_what_eager_code_does(
    written: dict[str, Written],
) -> None:
    # The combined kernel as a GPU gets it (Triton's code, run here by its interpreter), on
    # shapes that change as a server's do, so that some of its sizes are symbolic.
    kernels = written["combined"].checked(expect="equal")
    code = "".join(p.read_text() for p in written["combined"].cache.rglob("*.py"))
    assert "'num_kernels': 3" in code and "'xnumel_2': None" in code, kernels
