"""CUDA graphs for the forwards that repeat with the same shapes: decode, draft, verify, extend.

A decode step of a small batch launches a few hundred small kernels; launched one by one from
Python they take longer than the GPU needs to read the weights. Captured once per input shape
and replayed, they cost one launch, and the step becomes what it is on a real deployment:
bound by memory bandwidth. SGLang does the same (``--disable-cuda-graph`` turns it off).

A graph replays on fixed buffers: each call copies its inputs into the buffers it was captured
with, replays, and returns the graph's output buffers, which the next replay of the same shape
overwrites (the caller uses them before that). The KV caches are read and written in place, so
graphs are dropped when the caches are replaced.

A prefill's shape (batch and padded prompt length) varies from batch to batch, and it runs
eagerly unless the server asks for prefill graphs (``--cuda-graph-backend-prefill full``):
then the target's prefill forward is captured per shape too, at most PREFILL_SHAPES of them
of at most PREFILL_TOKENS tokens each (others run eagerly), so that a benchmark's repeated
batch is queued by one launch instead of a few hundred: its time is then the GPU's, not the
host's. SGLang 0.5.23 captures
prefills by default on CUDA (its ``breakable`` backend, per token-count bucket).

Modes: ``cuda`` captures and replays; ``off`` runs eagerly; ``emulate`` runs eagerly on the same
fixed buffers a graph would use, outputs overwritten call after call, so that the buffer
handling of the ``cuda`` mode is tested on a machine without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

WARMUP_RUNS = 2  # eager runs on a side stream before capture, as torch's docs advise
# The most prefill shapes captured: each graph keeps its activations' memory, and a server fed
# prompts of ever new lengths would otherwise capture one graph per batch.
PREFILL_SHAPES = 8
# The most tokens (batch x padded prompt length) a captured prefill holds: its logits and
# activations stay in the graph's memory. A larger prefill runs eagerly, as SGLang captures
# prefills up to a token budget (--piecewise-cuda-graph-max-tokens, 2048 by default in 0.5.12).
PREFILL_TOKENS = 2048
PREFILL = "prefill"  # the first element of a prefill's call site

Outputs = tuple[Tensor, ...]


def _key(site: Hashable, inputs: tuple[Tensor, ...]) -> Hashable:
    """A graph's key: its call site and its inputs' shapes and dtypes."""
    return (site, *((t.shape, t.dtype) for t in inputs))


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: tuple[Tensor, ...]
    outputs: Outputs


MODES = ("off", "cuda", "emulate")


class GraphRunner:
    """Runs functions of tensors through CUDA graphs, one per call site and input shapes."""

    def __init__(self, mode: str = "off", prefill: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f"graph mode {mode!r} is not one of {MODES}")
        self.mode = mode
        self.prefill = prefill  # capture prefill forwards too (run_prefill)
        self.prefills = 0  # prefill shapes among the graphs
        self.graphs: dict[Hashable, _Graph] = {}
        self.captures = 0  # graphs captured (or emulated) so far, for logs and tests

    def run(self, site: Hashable, fn: Callable[..., Outputs], *inputs: Tensor) -> Outputs:
        """Return fn(*inputs), replayed from a graph when the inputs allow it."""
        if self.mode == "off":
            return tuple(fn(*inputs))
        key = _key(site, inputs)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._new_graph(fn, inputs)
        for buffer, value in zip(entry.inputs, inputs, strict=True):
            buffer.copy_(value)
        if entry.graph is not None:
            entry.graph.replay()
        else:  # emulate: the same buffers, outputs overwritten in place
            for buffer, value in zip(entry.outputs, fn(*entry.inputs), strict=True):
                buffer.copy_(value)
        return entry.outputs

    def run_prefill(self, site: Hashable, fn: Callable[..., Outputs], *inputs: Tensor) -> Outputs:
        """Return fn(*inputs) for a prefill: from a graph where prefill graphs are asked for and
        this shape has one, or may have one (fewer than PREFILL_SHAPES captured, its first
        input, the token ids, no more than PREFILL_TOKENS); else eagerly."""
        if self.mode == "off" or not self.prefill:
            return tuple(fn(*inputs))
        if _key((PREFILL, site), inputs) not in self.graphs:
            if self.prefills >= PREFILL_SHAPES or inputs[0].numel() > PREFILL_TOKENS:
                return tuple(fn(*inputs))
            self.prefills += 1
        return self.run((PREFILL, site), fn, *inputs)

    def reset(self) -> None:
        """Drop every graph: the buffers they read (the KV caches) were replaced."""
        self.graphs.clear()
        self.prefills = 0

    def _new_graph(self, fn: Callable[..., Outputs], inputs: tuple[Tensor, ...]) -> _Graph:
        buffers = tuple(t.clone() for t in inputs)
        self.captures += 1
        if self.mode == "emulate":
            return _Graph(None, buffers, tuple(t.clone() for t in fn(*buffers)))
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                fn(*buffers)
        torch.cuda.current_stream().wait_stream(side)
        # Each graph keeps its own memory pool: graphs here replay in varying orders, so one
        # graph's temporaries must never share memory with another's outputs. Thread-local
        # capture: the probe's writer thread may query its CUDA events meanwhile.
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outputs = tuple(fn(*buffers))
        return _Graph(graph, buffers, outputs)
