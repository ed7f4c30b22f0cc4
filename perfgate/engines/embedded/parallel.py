"""Tensor parallelism: the process group of a ``--tp-size N`` server and the models' shards.

As in SGLang (and Megatron), every attention and MLP block is split over the N ranks: the
query, key and value projections and the MLP's gate and up projections column-wise (each
rank computes ``n_head / N`` heads and ``ffn_dim / N`` hidden units), the attention's output
and the MLP's down projection row-wise, each followed by an all-reduce that sums the ranks'
partial outputs. The KV caches hold each rank's own heads. The token embedding, the LM head,
the norms and the EAGLE-3 head's fusing layer are replicated: they are a small part of a
decoder's work, and replicated they need no collective, so every rank ends each forward with
the same logits and makes the same decisions without being told them.

Rank 0 is the server: it serves HTTP and schedules. Before each batch it sends the batch's
requests to the other ranks (``Leader``); each of them runs the same decoding loop on its
shard (``follow``), drawing the same sampling coins from a generator seeded alike. Scoring a
prompt by teacher forcing (the equivalence rule's input logprobs) goes to every rank alike. Control
messages travel over a gloo group on the CPU; the all-reduces over gloo on the CPU and over
NCCL on CUDA, where they are captured inside the CUDA graphs like every other kernel. Every
rank loads the whole model, checks that the others loaded the same, then keeps its shard.

The probe runs in every rank and marks each record with its rank. The phase timings a run
records are rank 0's (``perfgate.measure``); each rank's median cycle time and their spread go
with the run's engine metrics (``rank_cycle_ms.<rank>``, ``rank_cycle_ms.spread``), so a rank
that lags shows. ``perfgate profile`` traces rank 0.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from perfgate.engines.embedded.api import InputLogprobs
from perfgate.engines.embedded.batch import Batch, Generation, Request
from perfgate.engines.embedded.model import Attention, CachedModel, FeedForward, Transformer
from perfgate.engines.embedded.ranks import NVLS_VARIABLE
from perfgate.engines.embedded.scoring import score_input
from perfgate.errors import ConfigError

logger = logging.getLogger("perfgate.engines.embedded")

JOIN_TIMEOUT = timedelta(minutes=10)
GENERATE, SCORE = (
    "generate",
    "score",
)  # the jobs rank 0 sends  # ranks load their models after joining, not before


class _Worker(Protocol):
    target: Transformer

    def generate(
        self, requests: Sequence[Request], on_step: Callable[[Batch], None] | None = None
    ) -> list[Generation]: ...


@dataclass(frozen=True)
class TensorGroup:
    """This process's place in a tensor-parallel server."""

    rank: int
    world: int
    control: Any  # a gloo ProcessGroup: batches travel here, on the CPU
    reduce: Any  # the ProcessGroup of the all-reduces: gloo on the CPU, NCCL on CUDA

    def all_reduce(self, x: Tensor) -> Tensor:
        """Sum x over the ranks, in place; return it."""
        dist.all_reduce(x, group=self.reduce)
        return x


def join_group(rank: int, world: int, port: int, device: torch.device) -> TensorGroup:
    """Join the server's process group at 127.0.0.1:port; return this rank's group.

    Multicast NVLink reductions (NVLS) stay off unless the environment turns them on: the
    shared GPU hosts perfgate runs on require it.
    """
    os.environ.setdefault(NVLS_VARIABLE, "0")
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=JOIN_TIMEOUT,
        # NCCL's communicator is made now, not at the first all-reduce: never in a capture.
        device_id=device if device.type == "cuda" else None,
    )
    control = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    return TensorGroup(rank, world, control, dist.group.WORLD)


def check_split(world: int, n_head: int, ffn_dim: int, flag: str) -> None:
    """Raise ConfigError unless a model's heads and MLP width split evenly over world ranks."""
    for what, size in ((f"{n_head} attention heads", n_head), (f"MLP width {ffn_dim}", ffn_dim)):
        if size % world:
            raise ConfigError(
                f"{world} ranks cannot split the {what} of {flag}",
                field="--tp-size",
                fix=f"use a --tp-size that divides {size}",
            )


class RowParallelLinear(nn.Module):
    """A linear layer over this rank's slice of the input features, then the all-reduce."""

    def __init__(self, linear: nn.Linear, group: TensorGroup) -> None:
        super().__init__()
        self.linear = linear
        self.group = group

    def forward(self, x: Tensor) -> Tensor:
        return self.group.all_reduce(self.linear(x))


def _slice_linear(linear: nn.Linear, dim: int, rank: int, world: int) -> nn.Linear:
    """Return a linear layer holding rank's part of linear's weight, split along dim.

    dim 0 splits the output features (column-parallel), dim 1 the input ones (row-parallel).
    """
    weight = linear.weight.detach().chunk(world, dim=dim)[rank].clone()
    out_features, in_features = weight.shape
    part = nn.Linear(in_features, out_features, bias=False, device=weight.device)
    part.weight = nn.Parameter(weight, requires_grad=False)
    return part


def _unsharded(module: nn.Module) -> nn.Linear:
    if not isinstance(module, nn.Linear):
        raise RuntimeError(f"cannot shard {module}: the model is sharded already")
    return module


def shard_model(model: CachedModel, group: TensorGroup) -> None:
    """Keep only this rank's shard of every attention and MLP block of model, in place.

    The KV caches are allocated again for the heads this rank holds.
    """
    rank, world = group.rank, group.world
    rows, slots = model.cache_shape()
    for module in list(model.modules()):
        if isinstance(module, Attention):
            module.wq = _slice_linear(module.wq, 0, rank, world)
            module.wk = _slice_linear(module.wk, 0, rank, world)
            module.wv = _slice_linear(module.wv, 0, rank, world)
            module.wo = RowParallelLinear(
                _slice_linear(_unsharded(module.wo), 1, rank, world), group
            )
            module.n_head //= world
        elif isinstance(module, FeedForward):
            module.w1 = _slice_linear(module.w1, 0, rank, world)
            module.w3 = _slice_linear(module.w3, 0, rank, world)
            module.w2 = RowParallelLinear(
                _slice_linear(_unsharded(module.w2), 1, rank, world), group
            )
    if rows:
        model.setup_cache(rows, slots)
    if next(model.parameters()).is_cuda:
        torch.cuda.empty_cache()  # the full weights just dropped


def check_replicas(group: TensorGroup, model: nn.Module, flag: str) -> None:
    """Raise ConfigError unless every rank loaded the same weights of model (before sharding).

    The ranks decide alike only if their logits agree: a model seeded on devices whose random
    streams differ would make them part ways, and the collectives would then hang.
    """
    digest = [float(p.detach().double().abs().sum()) for p in model.parameters()]
    everyone: list[Any] = [None] * group.world
    dist.all_gather_object(everyone, digest, group=group.control)
    same = all(
        len(other) == len(digest)
        and all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(other, digest, strict=True))
        for other in everyone
    )
    if not same:
        raise ConfigError(
            f"the ranks loaded different weights for {flag}",
            field="--tp-size",
            fix="give the model a weights file (model.safetensors) so every rank loads the same",
        )


class Leader:
    """Rank 0's worker as its scheduler drives it: each job goes to every rank first.

    Jobs are decoding a batch (the scheduler's thread) and scoring a prompt by teacher
    forcing (an HTTP handler's thread). They run one at a time, each rank taking them in the
    order rank 0 sent them, so the ranks' collectives always pair up.
    """

    def __init__(
        self,
        worker: _Worker,
        group: TensorGroup,
        after_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.worker = worker
        self.group = group
        self.lock = threading.Lock()
        # Called when a job fails here, before the failure is answered: a rank that exited
        # breaks every collective, and the server then ends instead (ranks.RankProcesses).
        self.after_failure = after_failure

    def generate(
        self, requests: Sequence[Request], on_step: Callable[[Batch], None] | None = None
    ) -> list[Generation]:
        """Send the batch to the other ranks, then decode it here with them."""
        with self.lock:
            try:
                _send(self.group, (GENERATE, list(requests)))
                return self.worker.generate(requests, on_step)
            except Exception:
                self.after_failure()
                raise

    def score(self, ids: Sequence[int], start: int, top_n: int) -> InputLogprobs:
        """Score ids[start:] under the target here and on the other ranks."""
        with self.lock:
            try:
                _send(self.group, (SCORE, list(ids), start, top_n))
                return score_input(self.worker.target, ids, start, top_n)
            except Exception:
                self.after_failure()
                raise


def _send(group: TensorGroup, job: tuple[Any, ...]) -> None:
    dist.broadcast_object_list([job], src=0, group=group.control)


def follow(worker: _Worker, group: TensorGroup) -> None:
    """On a rank other than 0: run every job rank 0 sends, for ever.

    A job that fails here fails on rank 0 as well (the same checks run on the same
    requests), so the loop goes on to the next one, as rank 0's scheduler does.
    """
    while True:
        message: list[Any] = [None]
        dist.broadcast_object_list(message, src=0, group=group.control)
        kind, *job = message[0]
        try:
            if kind == GENERATE:
                worker.generate(*job)
            else:
                score_input(worker.target, *job)
        except Exception:
            logger.exception("rank %d: a job failed", group.rank)
