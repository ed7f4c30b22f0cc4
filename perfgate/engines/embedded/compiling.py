"""``--enable-torch-compile``: the decoder layers compiled by ``torch.compile``, regionally.

A decode step of a small batch is bound by memory bandwidth only once its kernels are few:
eagerly, each of a layer's norms, rotary embeddings, activation and residual adds is several
small kernels, each a launch and a pass over its tensors. Compiled, Inductor fuses each run of
them into one kernel; the matrix products stay cuBLAS's. On an H200 this halves the large
configuration's decode step (benchmarks/results/h200-real-weights.md). SGLang's
``--enable-torch-compile`` does the same for its decode batches.

The layers are compiled one by one (regional compilation): every layer runs the same code on
tensors of the same shapes, so one compiled graph serves them all. Shapes that vary (tokens
per forward, cache slots read) become symbolic after their first change, so a server compiles
each layer kind about twice.

The write into the KV cache is part of each layer's graph: ``KVCache.update`` indexes its
whole buffers, which Inductor turns into a store inside the kernel that rotates the keys.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any

import torch
from torch import nn

from perfgate.engines.embedded.model import Eagle3Layer, Transformer, TransformerBlock

RECOMPILE_LIMIT = 64
# The embedding's kernels (the lookup, the rotary tables' gathers, the causal mask) read and
# write nothing of each other's: Inductor's combo kernels launch them as one. On an H200 the
# decode step took 4-5 us less (three kernels of 4.7 us became one of 2.0,
# benchmarks/results/h200-real-weights.md). On a GPU only: a CPU's compiled code is not
# Triton's. torch.compile takes a mode or options, not both, so in the default mode.
EMBED_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"combo_kernels": True}


def compile_layers(model: nn.Module, mode: str | None = None, whole_rows: bool = True) -> int:
    """Compile every decoder layer of model in place, in torch.compile's mode (None: its
    default), and a target's embedding, final norm and LM head, and argmax; return how many layers
    were compiled. With whole_rows (the default), Inductor reduces each norm's row in one
    pass (``whole_row_reductions``: a setting of the process, as torch's own are)."""
    # One compiled layer's code serves every layer and forward: a graph per kind of forward
    # (one token, several, the first layer's) and per attention backend, past torch's default
    # limit of 8, beyond which it runs the layer eagerly. SGLang raises the limit too.
    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
    )
    # Each norm in one pass over its row: on an H200 the large configuration's decode step
    # was 0.5-1% shorter (benchmarks/results/h200-real-weights.md, 2026-12-01 (fourth)).
    whole_row_reductions(whole_rows)
    compiled = 0
    for module in model.modules():
        if isinstance(module, (TransformerBlock, Eagle3Layer)):
            module.compile(mode=mode)
            compiled += 1
        elif isinstance(module, Transformer):
            # Eagerly, the lookups and the causal mask, then the last residual add, the norm
            # and the argmax, are a dozen small kernels around the layers; compiled, a few.
            # The class's functions, bound here: compiling again in another mode starts over.
            for name in ("embed", "finish", "greedy"):
                method = MethodType(getattr(Transformer, name), module)
                options = EMBED_OPTIONS if name == "embed" and mode is None else None
                setattr(module, name, torch.compile(method, mode=mode, options=options))
    return compiled


def whole_row_reductions(on: bool = True) -> None:
    """Have Inductor reduce a row of up to WHOLE_ROW elements in one pass, from then on in
    this process (the choice is part of its cache keys), or (off) go back to its own rule.
    ``compile_layers`` sets it. See perfgate/engines/embedded/whole_rows.py."""
    from torch._inductor import config
    from torch._inductor.choices import InductorChoices
    from torch._inductor.virtualized import V

    from perfgate.engines.embedded.whole_rows import WholeRowChoices

    V.set_choices_handler(WholeRowChoices() if on else InductorChoices())  # this thread's
    if hasattr(config, "inductor_choices_class"):  # every thread's, and in the cache keys
        config.inductor_choices_class = WholeRowChoices if on else None
    else:  # an older torch: its cache keys would not tell the two kinds of code apart
        config.fx_graph_cache = False
