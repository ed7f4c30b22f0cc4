"""The embedded engine's models: a small Llama-style target and an EAGLE-3 draft head.

Config dataclasses and ``nn.Module``s only; the decoding loops live in ``worker.py`` and
``drafters.py``, the training recipe in ``train.py``.

Hidden-state indices, used to pick EAGLE-3 features: hidden state ``i`` is the residual stream
after ``i`` decoder layers, so ``0`` is the token embeddings and ``n_layer`` is the last layer's
output (before the final norm).

Attention with a KV cache takes an ``AttentionView``: the cache *slots* the new keys and values
are written to, and a boolean mask of the slots each query sees. A sequence decoded token by
token uses its positions as slots and sees every slot up to its own position
(``causal_view``), so rolling a cache back is resetting a length in the caller: a stale entry
beyond it is overwritten by the next forward at that position before any query at or after that
position runs. A draft tree writes its nodes to scratch slots past the sequence and sees its
ancestors only (``tree.py``). Without a view (training) attention is causal within the input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfgate.engines.embedded import folded_norms, triton_attention

BYTE_VOCAB = 256
KV_BUCKET = 128  # attention reads the cache in multiples of this many slots
# --attention-backend: torch_native is PyTorch's scaled_dot_product_attention (SGLang's name for
# it); triton is triton_attention's kernel, for forwards over a KV cache.
ATTENTION_BACKENDS = ("torch_native", "triton")


@dataclass(frozen=True)
class TargetConfig:
    """A Llama-style decoder; the defaults are the shipped ``perfgate/llama-tiny``."""

    vocab_size: int = BYTE_VOCAB
    n_layer: int = 4
    dim: int = 128
    n_head: int = 4
    ffn_dim: int = 384
    max_seq_len: int = 2048
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        _check_heads(self.dim, self.n_head)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head


@dataclass(frozen=True)
class DraftConfig:
    """An EAGLE-3 draft head; the defaults are the shipped ``perfgate/eagle3-llama-tiny``.

    ``feature_layers`` are the low, middle and high hidden states of the target that the head
    fuses. EAGLE-3 taps the inputs of layers ``(2, L//2, L-3)`` of an ``L``-layer target; in a
    4-layer target those collapse onto two layers, so the default taps the outputs of the first,
    the middle and the last layer: ``(1, L//2, L) = (1, 2, 4)``.
    """

    dim: int = 128
    n_head: int = 4
    ffn_dim: int = 384
    feature_layers: tuple[int, int, int] = (1, 2, 4)
    max_seq_len: int = 2048
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    seed: int = 1

    def __post_init__(self) -> None:
        _check_heads(self.dim, self.n_head)
        if len(self.feature_layers) != 3:
            raise ValueError(f"feature_layers must name 3 layers, got {self.feature_layers}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head


def _check_heads(dim: int, n_head: int) -> None:
    if dim % n_head or (dim // n_head) % 2:
        raise ValueError(f"dim {dim} must split into {n_head} heads of an even size")


class Rope(NamedTuple):
    cos: Tensor  # [B, T, head_dim], float32 (a table: [max_seq_len, head_dim])
    sin: Tensor

    def at(self, positions: Tensor) -> Rope:
        """This table's angles at positions [B, T]."""
        return Rope(self.cos[positions], self.sin[positions])


class AttentionView(NamedTuple):
    """Where a forward writes its keys and values, and which cache slots each query sees."""

    slots: Tensor  # [B, T] long: cache slot of each input token
    mask: Tensor  # [B, 1, T, kv_len] bool (or additive, once a forward began); kv_len slots read

    def additive(self, dtype: torch.dtype) -> AttentionView:
        """This view with its mask as attention adds it: 0 where a query sees a slot, -inf
        elsewhere, in the queries' dtype.

        Attention converts a bool mask so in every layer; a forward converts it once instead.
        """
        if self.mask.dtype != torch.bool:
            return self
        hidden = torch.full(self.mask.shape, float("-inf"), dtype=dtype, device=self.mask.device)
        return AttentionView(self.slots, hidden.masked_fill_(self.mask, 0.0))


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype x's matrix products produce: autocast's where it is on, else x's own."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def greedy(logits: Tensor) -> Tensor:
    """Return the argmax token of each row of logits [..., vocab]."""
    return logits.argmax(dim=-1)


def rms_scale(x: Tensor, eps: float) -> Tensor:
    """The RMS scale of x's rows, float32 [..., 1]: 1 / sqrt(mean(x^2) + eps), what an
    RMSNorm multiplies a row by before its weight (and what ``folded_norms`` kernels compute)."""
    xf = x.float()
    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


def kv_bucket(length: int, max_seq_len: int) -> int:
    """Return the cache slots to read for queries up to slot length - 1, rounded up."""
    return min(max_seq_len, -(-length // KV_BUCKET) * KV_BUCKET)


def causal_view(positions: Tensor, kv_len: int) -> AttentionView:
    """Write at the positions [B, T]; let each query see every slot up to its own position."""
    keys = torch.arange(kv_len, device=positions.device)
    mask = keys.view(1, 1, 1, -1) <= positions.unsqueeze(1).unsqueeze(-1)
    return AttentionView(positions, mask)


def rope_tables(head_dim: int, max_seq_len: int, base: float, device: torch.device) -> Rope:
    """Return the rotary cos and sin tables, float32 [max_seq_len, head_dim]."""
    inv_freq = base ** -(torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, device=device).float(), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return Rope(angles.cos(), angles.sin())


def apply_rope(x: Tensor, rope: Rope) -> Tensor:
    """Rotate x [B, H, T, head_dim] by the angles of its positions."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    cos, sin = rope.cos.unsqueeze(1), rope.sin.unsqueeze(1)
    return (xf * cos + rotated * sin).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (xf * rms_scale(xf, self.eps)).type_as(x) * self.weight


class KVStore(nn.Module):
    """Where an attention layer keeps its keys and values between forwards."""

    def update(self, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v [B, H, T, D] at slots [B, T]; return all keys and values to attend to."""
        raise NotImplementedError


class KVCache(KVStore):
    k: Tensor  # [batch, heads, slots, head_dim]
    v: Tensor

    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v [B, H, T, D] at slots [B, T]; return the cache of those B rows.

        The write indexes the whole buffers rather than a slice of them: compiled, a write
        into a slice of a buffer becomes a copy of the whole buffer on every forward, while
        this one becomes a store fused into the kernel that computes k and v (``compiling``).
        """
        rows, heads = k.shape[:2]
        index = (
            torch.arange(rows, device=slots.device).view(rows, 1, 1),
            torch.arange(heads, device=slots.device).view(1, heads, 1),
            slots.unsqueeze(1),
        )
        self.k.index_put_(index, k)
        self.v.index_put_(index, v)
        return self.k[:rows], self.v[:rows]

    def copy_slots(self, source: Tensor, dest: Tensor) -> None:
        """Copy the entries at slots source [B, N] to slots dest [B, N], gathering first."""
        for cache in (self.k, self.v):
            rows = cache[: source.shape[0]]
            shape = (-1, rows.shape[1], -1, rows.shape[3])
            moved = rows.gather(2, source[:, None, :, None].expand(shape))
            rows.scatter_(2, dest[:, None, :, None].expand(shape), moved)


class Attention(nn.Module):
    def __init__(self, in_dim: int, dim: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.head_dim = dim // n_head
        self.wq = nn.Linear(in_dim, dim, bias=False)
        self.wk = nn.Linear(in_dim, dim, bias=False)
        self.wv = nn.Linear(in_dim, dim, bias=False)
        self.wo: nn.Module = nn.Linear(dim, dim, bias=False)  # row-parallel under TP
        self.wqkv: nn.Linear | None = None  # wq, wk and wv as one, once fuse_projections ran
        self.kv_cache: KVStore | None = None  # a KVCache, or the trainer's unrolled keys
        self.backend = "torch_native"  # one of ATTENTION_BACKENDS (use_attention_backend)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Return the queries, keys and values of x: one matrix product once fused."""
        if self.wqkv is None:
            return self.wq(x), self.wk(x), self.wv(x)
        q, k, v = self.wqkv(x).chunk(3, dim=-1)
        return q, k, v

    def write_cache(self, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store k, v at slots in the cache; return the keys and values to attend to."""
        assert self.kv_cache is not None
        return self.kv_cache.update(slots, k, v)

    def forward(self, x: Tensor, rope: Rope, view: AttentionView | None) -> Tensor:
        return cast(Tensor, self.wo(self.heads(x, rope, view)))

    def heads(
        self, x: Tensor, rope: Rope, view: AttentionView | None, scale: Tensor | None = None
    ) -> Tensor:
        """The attention's output before its output projection, [B, T, dim]; with scale
        [B, T, 1] (float32), the queries, keys and values scaled by it first (``folded``)."""
        bsz, seqlen, _ = x.shape
        q, k, v = (
            p.reshape(bsz, seqlen, self.n_head, self.head_dim).transpose(1, 2)
            for p in self.project(x)
        )
        if scale is not None:
            per_head = scale.unsqueeze(1)  # [B, 1, T, 1]
            q, k, v = ((p.float() * per_head).type_as(p) for p in (q, k, v))
        return self.attend(apply_rope(q, rope), apply_rope(k, rope), v, view)

    def attend(
        self, q: Tensor, k: Tensor | None, v: Tensor | None, view: AttentionView | None
    ) -> Tensor:
        """Attend rotated q [B, H, T, D] to k and v [B, H, T, D], written into the cache
        first if there is one (None: already written there); return [B, T, dim]."""
        bsz, _, seqlen, _ = q.shape
        if view is None or self.kv_cache is None:
            assert k is not None and v is not None
            if view is None:  # training: causal within the input; the cache is not touched
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=view.mask)
            return out.transpose(1, 2).reshape(bsz, seqlen, -1)
        if k is None or v is None:
            cache = cast(KVCache, self.kv_cache)
            k_all, v_all = cache.k[:bsz], cache.v[:bsz]
        else:
            k_all, v_all = self.write_cache(view.slots, k, v)
        if self.backend == "triton":  # [B, T, H, D]: the output projection's layout
            out = triton_attention.attend(q, k_all, v_all, view.mask)
            return cast(Tensor, out.reshape(bsz, seqlen, -1))
        kv_len = view.mask.shape[-1]
        out = F.scaled_dot_product_attention(
            q, k_all[:, :, :kv_len], v_all[:, :, :kv_len], attn_mask=view.mask
        )
        return out.transpose(1, 2).reshape(bsz, seqlen, -1)


class FeedForward(nn.Module):
    def __init__(self, dim: int, ffn_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, ffn_dim, bias=False)
        self.w3 = nn.Linear(dim, ffn_dim, bias=False)
        self.w2: nn.Module = nn.Linear(ffn_dim, dim, bias=False)  # row-parallel under TP
        self.w13: nn.Linear | None = None  # w1 and w3 as one, once fuse_projections ran

    def forward(self, x: Tensor) -> Tensor:
        if self.w13 is None:
            gate, up = self.w1(x), self.w3(x)
        else:
            gate, up = self.w13(x).chunk(2, dim=-1)
        return cast(Tensor, self.w2(F.silu(gate) * up))


class TransformerBlock(nn.Module):
    def __init__(self, config: TargetConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config.dim, config.dim, config.n_head)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config.dim, config.ffn_dim)
        self.folded = False  # the norms' weights are in the products after them (fold_norms)

    def forward(
        self, x: Tensor, rope: Rope, view: AttentionView | None, pending: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Return the residual stream after attention and the MLP's output, whose sum is this
        layer's output; pending is the previous layer's MLP output, to add to x first.

        The MLP's residual add is left to the next layer, so that compiled, it fuses into that
        layer's first norm (one kernel less per layer), as SGLang's fused add-and-norm does;
        the sum is the same bf16 addition either way. Folded, the layer adds both into x in
        place and returns (x, None).
        """
        if pending is not None:
            x = x + pending
        if self.folded:
            return self._folded(x, rope, view), None
        h = x + self.attention(self.attention_norm(x), rope, view)
        return h, self.feed_forward(self.ffn_norm(h))

    def _folded(self, x: Tensor, rope: Rope, view: AttentionView | None) -> Tensor:
        """The layer on x, its norms folded (``folded_norms``): x is updated in place."""
        attention, mlp = self.attention, self.feed_forward
        assert attention.wqkv is not None and mlp.w13 is not None
        cache, kernels = attention.kv_cache, folded_norms.kernels_run(x)
        if view is not None and isinstance(cache, KVCache) and kernels:
            q = folded_norms.norm_rope(
                attention.wqkv(x), x, rope.cos, rope.sin, view.slots, cache.k, cache.v,
                self.attention_norm.eps, attention.n_head,
            )  # fmt: skip
            heads = attention.attend(q.transpose(1, 2), None, None, view)
        else:
            scale = rms_scale(x, self.attention_norm.eps)
            heads = attention.heads(x, rope, view, scale)
        folded_norms.add_product_(x, heads, cast(nn.Linear, attention.wo).weight)
        gate_up = mlp.w13(x)
        if kernels:
            act = folded_norms.norm_silu(gate_up, x, self.ffn_norm.eps)
        else:
            scale = rms_scale(x, self.ffn_norm.eps)
            gate, up = (gate_up.float() * scale).chunk(2, dim=-1)
            act = (F.silu(gate) * up).type_as(gate_up)
        folded_norms.add_product_(x, act, cast(nn.Linear, mlp.w2).weight)
        return x


class CachedModel(nn.Module):
    """Shared plumbing: rotary tables, and a KV cache per attention once set up."""

    max_seq_len: int
    rope_base: float
    head_dim: int
    _rope: Rope | None = None

    def setup_cache(self, batch_size: int = 1, slots: int | None = None) -> None:
        """Allocate KV caches of batch_size rows and slots entries (default: the context)."""
        weight = next(self.parameters())
        for module in self.modules():
            if isinstance(module, Attention):
                shape = (batch_size, module.n_head, slots or self.max_seq_len, module.head_dim)
                module.kv_cache = KVCache(shape, weight.dtype, weight.device)

    def cache_shape(self) -> tuple[int, int]:
        """Return the (rows, slots) the KV caches hold; (0, 0) without caches."""
        cache = next(m.kv_cache for m in self.modules() if isinstance(m, Attention))
        return (cache.k.shape[0], cache.k.shape[2]) if isinstance(cache, KVCache) else (0, 0)

    def ensure_cache(self, rows: int, slots: int) -> bool:
        """Grow the KV caches to hold rows x slots at least; return whether they were replaced.

        Replacing drops their content, so call it before a batch's prefill only.
        """
        have_rows, have_slots = self.cache_shape()
        if have_rows >= rows and have_slots >= slots:
            return False
        self.setup_cache(max(rows, have_rows), min(self.max_seq_len, max(slots, have_slots)))
        return True

    def copy_slots(self, source: Tensor, dest: Tensor) -> None:
        """Move cache entries from slots source [B, N] to dest [B, N] in every layer."""
        for module in self.modules():
            if isinstance(module, KVCache):
                module.copy_slots(source, dest)

    def rope_table(self, device: torch.device) -> Rope:
        """Return the rotary tables of every position, built once per device."""
        if self._rope is None or self._rope.cos.device != device:
            self._rope = rope_tables(self.head_dim, self.max_seq_len, self.rope_base, device)
        return self._rope

    def rope(self, positions: Tensor) -> Rope:
        """Return the rotary tables at positions [B, T]."""
        return self.rope_table(positions.device).at(positions)


class Transformer(CachedModel):
    def __init__(self, config: TargetConfig) -> None:
        super().__init__()
        self.config = config
        self.max_seq_len = config.max_seq_len
        self.rope_base = config.rope_base
        self.head_dim = config.head_dim
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor,
        view: AttentionView | int | None = None,
        capture: Sequence[int] = (),
    ) -> tuple[Tensor, list[Tensor]]:
        """Return logits [B, T, vocab] and the hidden states [B, T, dim] listed in capture.

        tokens and positions are [B, T]; view says where the cache is written and read: an
        AttentionView, or an int kv_len for ``causal_view(positions, kv_len)``, which the
        compiled embedding builds in its own kernels (None without caches: causal within the
        input).
        """
        x, rope, view = self.embed(tokens, positions, view, self.rope_table(positions.device))
        hidden = {0: x.clone()} if 0 in capture else {}  # folded layers update x in place
        pending: Tensor | None = None
        for i, layer in enumerate(self.layers, start=1):
            x, pending = layer(x, rope, view, pending)
            if i in capture:
                hidden[i] = x.clone() if pending is None else x + pending
        return self.finish(x, pending), [hidden[i] for i in capture]

    def embed(
        self, tokens: Tensor, positions: Tensor, view: AttentionView | int | None, table: Rope
    ) -> tuple[Tensor, Rope, AttentionView | None]:
        """Return the tokens' embeddings, the rotary tables at positions (of table, every
        position's), and view (``forward``) with its mask made additive once.

        Eagerly, the lookups and the causal mask are seven small kernels before the first
        layer; compiled (``compile_layers``), three: the embedding, both gathers, the mask.
        Passed a view, its mask is built by the caller's kernels, outside the compiled code.
        """
        x = self.tok_embeddings(tokens)
        rope = table.at(positions)
        if isinstance(view, int):
            view = causal_view(positions, view)
        return x, rope, None if view is None else view.additive(compute_dtype(x))

    def finish(self, x: Tensor, pending: Tensor | None) -> Tensor:
        """Return the logits of the last layer's output, x + pending (``TransformerBlock``)."""
        return cast(Tensor, self.output(self.norm(x if pending is None else x + pending)))

    def greedy(self, logits: Tensor) -> Tensor:
        """``greedy``, compiled with the model (``compile_layers``): one Triton kernel, on an
        H200's decode step 1.6 us, where PyTorch's own took 4.4
        (benchmarks/results/h200-real-weights.md)."""
        return greedy(logits)


class Eagle3Layer(nn.Module):
    """The draft's one decoder layer: attention over [norm(embedding), norm(feature)] (2·dim)."""

    def __init__(self, config: DraftConfig) -> None:
        super().__init__()
        self.embed_norm = RMSNorm(config.dim, config.norm_eps)
        self.hidden_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(2 * config.dim, config.dim, config.n_head)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config.dim, config.ffn_dim)

    def forward(
        self, embeds: Tensor, hidden: Tensor, rope: Rope, view: AttentionView | None
    ) -> Tensor:
        x = torch.cat([self.embed_norm(embeds), self.hidden_norm(hidden)], dim=-1)
        # The residual stream carries the feature, as in EAGLE-3's reference layer.
        h = hidden + self.attention(x, rope, view)
        return cast(Tensor, h + self.feed_forward(self.ffn_norm(h)))


class _Shared(NamedTuple):
    tok_embeddings: nn.Embedding
    output: nn.Linear


class Eagle3Draft(CachedModel):
    """EAGLE-3 draft head over a target whose embedding and LM head it shares.

    The shared modules are held outside this module's parameters: they are neither saved with
    the draft's weights nor moved by ``.to()``; the target owns them.
    """

    def __init__(self, config: DraftConfig, target: Transformer) -> None:
        super().__init__()
        self.config = config
        self.max_seq_len = config.max_seq_len
        self.rope_base = config.rope_base
        self.head_dim = config.head_dim
        self.fc = nn.Linear(3 * config.dim, config.dim, bias=False)
        self.layer = Eagle3Layer(config)
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.shared = _Shared(target.tok_embeddings, target.output)

    def fuse(self, features: Tensor) -> Tensor:
        """Reduce the concatenated low/mid/high features [B, T, 3·dim] to [B, T, dim]."""
        return cast(Tensor, self.fc(features))

    def forward(
        self, tokens: Tensor, hidden: Tensor, positions: Tensor, view: AttentionView | None = None
    ) -> tuple[Tensor, Tensor]:
        """Return logits [B, T, vocab] and the output hidden [B, T, dim] for (token, hidden)."""
        rope = self.rope(positions)
        if view is not None:
            view = view.additive(compute_dtype(hidden))
        out = self.layer(self.shared.tok_embeddings(tokens), hidden, rope, view)
        return self.shared.output(self.norm(out)), out


def init_weights(model: nn.Module, seed: int) -> None:
    """Initialise every parameter deterministically from seed, on a generator of its device."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif param.dim() == 2 and "tok_embeddings" not in name:
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[1]), generator=generator)
            else:
                param.normal_(0.0, 1.0, generator=generator)


def use_attention_backend(model: nn.Module, backend: str) -> None:
    """Make every attention of model over a KV cache run on backend (ATTENTION_BACKENDS)."""
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(f"attention backend {backend!r} is not one of {ATTENTION_BACKENDS}")
    for module in model.modules():
        if isinstance(module, Attention):
            module.backend = backend


def fuse_projections(model: nn.Module) -> None:
    """Stack each attention's query, key and value projections, and each MLP's gate and up
    projections, into one linear layer each, in place, for inference.

    One matrix product reads the three (two) weights where three (two) products read them
    one after another, as SGLang's ``QKVParallelLinear`` and ``MergedColumnParallelLinear``
    do; the products' outputs are the same numbers, split back by ``chunk``. Checkpoints keep
    the separate weights, so run it after loading, and after sharding under tensor
    parallelism (each rank stacks its own slices). Training keeps the separate layers.

    On a GPU it also lays the down projections out column-major
    (``lay_out_down_projections``).
    """
    for module in model.modules():
        if isinstance(module, Attention) and module.wqkv is None:
            module.wqkv = _stacked(module.wq, module.wk, module.wv)
            del module.wq, module.wk, module.wv
        elif isinstance(module, FeedForward) and module.w13 is None:
            module.w13 = _stacked(module.w1, module.w3)
            del module.w1, module.w3
    if next(model.parameters()).is_cuda:
        lay_out_down_projections(model, column_major=True)


def fold_norms(model: nn.Module) -> int:
    """Fold each decoder layer's norms into the products after them, in place, for inference
    on CUDA (``folded_norms``): the stacked query, key and value weight and the stacked gate
    and up weight times their norm's weight, per input column; return how many layers.

    Run it after ``fuse_projections``. A layer split over tensor-parallel ranks is left as it
    is (its residual adds follow an all-reduce), and so is the draft's layer.
    """
    folded = 0
    for block in model.modules():
        if (
            isinstance(block, TransformerBlock)
            and not block.folded
            and block.attention.wqkv is not None
            and block.feed_forward.w13 is not None
            and type(block.attention.wo) is nn.Linear
            and type(block.feed_forward.w2) is nn.Linear
        ):
            for linear, norm in (
                (block.attention.wqkv, block.attention_norm),
                (block.feed_forward.w13, block.ffn_norm),
            ):
                weight = linear.weight.detach()
                scaled = (weight.float() * norm.weight.detach().float()).to(weight.dtype)
                linear.weight = nn.Parameter(scaled, requires_grad=False)
            block.folded = True
            folded += 1
    return folded


def lay_out_down_projections(model: nn.Module, column_major: bool) -> None:
    """Store each MLP's down projection weight column-major (the same [N, K] tensor, the N
    entries of a column contiguous), or row-major as trained, in place.

    For x [8, K] @ W.T at the large configuration's K of 5632, cuBLAS picks another split-K
    kernel for the column-major weight: 10.2 us a product with its reduce, against 11.2 us
    row-major, on an H200 (benchmarks/results/h200-real-weights.md); the other projections'
    times do not depend on their layout there. ``fuse_projections`` lays them out so on a GPU
    only: on a CPU the sums would round differently, for no measured gain.
    """
    for module in model.modules():
        if isinstance(module, FeedForward):
            down = cast(nn.Linear, getattr(module.w2, "linear", module.w2))  # row-parallel: inside
            weight = down.weight.detach()
            laid = weight.t().contiguous().t() if column_major else weight.contiguous()
            down.weight = nn.Parameter(laid, requires_grad=False)


def _stacked(*linears: nn.Module) -> nn.Linear:
    weights = [cast(nn.Linear, linear).weight.detach() for linear in linears]
    weight = torch.cat(weights, dim=0)
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device)
    fused.weight = nn.Parameter(weight, requires_grad=False)
    return fused
