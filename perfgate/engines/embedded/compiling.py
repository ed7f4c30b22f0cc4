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

The write into the KV cache stays outside the compiled graphs: compiled, an in-place write into
a slice of a module's buffer becomes a copy of the whole cache on every forward (on a CPU, a
forward over a 64-row cache took 34 ms so against 0.9 ms eagerly). Each layer
therefore compiles into two graphs, before and after the write, with the write run eagerly
between them; inside a captured CUDA graph (``graphs.py``) all of it replays as one launch.
"""

from __future__ import annotations

import torch
from torch import nn

from perfgate.engines.embedded.model import Attention, Eagle3Layer, TransformerBlock


def compile_layers(model: nn.Module) -> int:
    """Compile every decoder layer of model in place; return how many were compiled."""
    compiled = 0
    for module in model.modules():
        if isinstance(module, Attention):
            # An instance attribute: the layer's compiled code calls it, and graph-breaks.
            eager_write = torch.compiler.disable(module.write_cache)  # type: ignore[no-untyped-call]
            module.write_cache = eager_write  # type: ignore[method-assign]
        elif isinstance(module, (TransformerBlock, Eagle3Layer)):
            module.compile()
            compiled += 1
    return compiled
