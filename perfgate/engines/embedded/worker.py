"""The decoding loops: plain greedy decoding and EAGLE-style speculation, over a batch.

Plain functions and classes that take the models. Greedy, or sampled as SGLang samples
(``sampling.py``: the target's token after each position is drawn from its distribution, and
a draft is accepted when it is that token); the byte vocabulary has no EOS, so every sequence
runs to its ``max_new_tokens`` exactly. The sequences of a batch decode
together, one forward per step, each at its own positions; each accepts its own number of draft
tokens per cycle. A finished sequence stays in the batch until all are done, frozen: it stops
advancing, and what the forwards compute for it is dropped.

Each phase's device work is one function of tensors, without a host sync, so that on CUDA it
replays as one graph (``graphs.py``); the host sees the results once per step, in
``Batch.commit``. The next work is queued before that sync (the overlap schedule): a
speculative cycle's draft extend (inside ``accept``), a plain server's next step, so the GPU
works while the host keeps the tokens.

The probe times these methods by name (``perfgate/probe/targets.py``): keep every bit of a
phase's work inside its method, and ``EagleWorker.cycle`` around exactly one cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from perfgate.engines.embedded.batch import (
    Batch,
    Committing,
    Generation,
    Request,
    check_request,
)
from perfgate.engines.embedded.drafters import Drafter, take_columns
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.model import Transformer, greedy
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.sampling import SamplingTensors, choose_tokens
from perfgate.engines.embedded.slowdown import PhaseSlowdown, cuda_sleep_cycles_per_ms
from perfgate.engines.embedded.tree import (
    DraftTree,
    TreeAcceptance,
    accept_path,
    first_child_path,
    tree_attention,
    verify_greedy,
)
from perfgate.metrics import ACCEPT, CYCLE, DRAFT, DRAFT_EXTEND, VERIFY

WIDTH_REPLAYS = 20  # rounds of --debug-time-verify-widths: each width's forward, in turn


def _nothing(batch: Batch) -> None:
    pass


class Prompts(NamedTuple):
    ids: Tensor  # [B, P]: right-padded with zeros
    lengths: Tensor  # [B]
    positions: Tensor  # [B, P]


def pad_prompts(requests: Sequence[Request], device: torch.device) -> Prompts:
    """Right-pad the prompts of a batch; pad tokens sit past each prompt, where nothing reads."""
    width = max(len(r.prompt_ids) for r in requests)
    rows = [list(r.prompt_ids) + [0] * (width - len(r.prompt_ids)) for r in requests]
    ids = torch.tensor(rows, device=device)
    lengths = torch.tensor([len(r.prompt_ids) for r in requests], device=device)
    positions = torch.arange(width, device=device).expand(len(requests), -1)
    return Prompts(ids, lengths, positions)


def prefill_forward(
    target: Transformer,
    graphs: GraphRunner,
    prompts: Prompts,
    kv_len: int,
    capture: tuple[int, ...] = (),
) -> tuple[Tensor, list[Tensor]]:
    """The target's causal forward over the padded prompts: logits [B, P, vocab] and the hidden
    states of the layers in capture; replayed from a graph where the runner captures prefills
    (the outputs are then its buffers, which the next prefill of the shape overwrites)."""

    def forward(ids: Tensor, positions: Tensor) -> tuple[Tensor, ...]:
        logits, hidden = target(ids, positions, kv_len, capture)
        return (logits, *hidden)

    logits, *hidden = graphs.run_prefill((kv_len, capture), forward, prompts.ids, prompts.positions)
    return logits, hidden


def next_tokens(logits: Tensor, batch: Batch) -> Tensor:
    """The target's token after each position of logits [B, N, vocab], eagerly: [B, N]."""
    if batch.sampling is None:
        return greedy(logits)
    return choose_tokens(logits, batch.sampling, batch.draw_coins(logits.shape[1]))


def sampling_inputs(batch: Batch, columns: int) -> tuple[Tensor, ...]:
    """A graph's extra inputs for a batch that samples: its parameters and fresh coins."""
    if batch.sampling is None:
        return ()
    return (*batch.sampling, batch.draw_coins(columns))


def choose_in_graph(logits: Tensor, extra: Sequence[Tensor], target: Transformer) -> Tensor:
    """Inside a graph: the target's greedy choice without sampling inputs, else sampled (see
    sampling_inputs)."""
    if not extra:
        return target.greedy(logits)
    return choose_tokens(logits, SamplingTensors(*extra[:4]), extra[4])


def features_of(hidden: Sequence[Tensor]) -> Tensor | None:
    """Concatenate captured hidden states into EAGLE-3 features [B, T, 3·dim]; None if none."""
    return torch.cat(list(hidden), dim=-1) if hidden else None


class PlainWorker:
    """Plain decoding, one target forward per token for the whole batch."""

    def __init__(
        self,
        target: Transformer,
        graphs: GraphRunner | None = None,
        seed: int = 0,
        overlap: bool = True,
    ) -> None:
        self.target = target
        self.graphs = graphs or GraphRunner()
        self.generator = torch.Generator().manual_seed(seed)  # coins of sampled requests
        self.device = target.output.weight.device
        self.lookahead = 1
        self.step_hook: Callable[[], None] | None = None  # run before each decode step
        # Each step queued before the host keeps the last step's tokens (decode_step's doc);
        # False: after, as --disable-overlap-schedule asks.
        self.overlap = overlap

    def prefill(self, batch: Batch, prompts: Prompts) -> None:
        """Run the target over the prompts; commit each sequence's first token."""
        logits, _ = prefill_forward(self.target, self.graphs, prompts, batch.kv_len(self.lookahead))
        last = take_columns(logits, prompts.lengths - 1)  # [B, 1, vocab]
        batch.commit(next_tokens(last, batch), torch.ones_like(prompts.lengths), last)

    def decode_step(self, batch: Batch, previous: Committing | None = None) -> Committing:
        """Feed each sequence's last token at its position; start committing the next token.

        With `previous`, the last step's commit still on its way to the host, the host keeps
        its tokens once this step is queued, so the GPU runs this step meanwhile (the overlap
        schedule: every control decision of plain decoding is known without them, a token a
        step for each sequence still decoding).
        """
        kv_len = batch.kv_len(self.lookahead, ahead=0 if previous is None else 1)

        def step(tokens: Tensor, lengths: Tensor, *extra: Tensor) -> tuple[Tensor, Tensor]:
            positions = lengths.unsqueeze(1)
            logits, _ = self.target(tokens.unsqueeze(1), positions, kv_len)  # causal
            return choose_in_graph(logits, extra, self.target), logits

        extra = sampling_inputs(batch, 1)
        site = ("decode", kv_len, bool(extra))
        tokens, logits = self.graphs.run(site, step, batch.tokens, batch.lengths, *extra)
        committing = batch.start_commit(tokens, torch.ones_like(batch.lengths), logits)
        if previous is not None:
            batch.finish_commit(previous)
        return committing

    def check(self, request: Request) -> None:
        """Raise RequestError unless this request fits the model."""
        check_request(request, self.target.max_seq_len, self.lookahead)

    @torch.inference_mode()
    def generate(
        self, requests: Sequence[Request], on_step: Callable[[Batch], None] | None = None
    ) -> list[Generation]:
        """Decode a batch of requests together; on_step sees the batch after every step."""
        step_done = on_step or _nothing
        for request in requests:
            self.check(request)
        batch = Batch(requests, self.device, self.target.max_seq_len, self.generator)
        if self.target.ensure_cache(len(requests), batch.kv_len(self.lookahead, final=True)):
            self.graphs.reset()
        if not batch.done:
            self.prefill(batch, pad_prompts(requests, self.device))
            step_done(batch)
        pending: Committing | None = None  # the last step's, its tokens not yet on the host
        while pending is not None or not batch.done:
            if pending is not None and (not self.overlap or batch.ends_with_next_commit()):
                batch.finish_commit(pending)  # no step after it, or none queued before it
                pending = None
                step_done(batch)
                continue
            if self.step_hook is not None:
                self.step_hook()
            committing = self.decode_step(batch, pending)
            if pending is not None:
                step_done(batch)
            pending = committing
        return batch.generations()


class Decided(NamedTuple):
    """What one verify pass decided, on the device."""

    acceptance: TreeAcceptance
    path_logits: Tensor  # [B, num_steps + 1, vocab]: the target's logits at the path's nodes


class Accepted(NamedTuple):
    """What one verify pass accepted, batch-wide."""

    tree: TreeAcceptance
    starts: Tensor  # [B]: each sequence's length before the cycle (its root's position)
    committed: int  # tokens added to the outputs, all sequences together
    # On the host, per sequence still decoding: its batch row, and the drafts it accepted
    # (the bonus token excluded). The probe reads them (perfgate/probe/targets.py).
    rows: tuple[int, ...] = ()
    drafts: tuple[int, ...] = ()


class VerifyDelay:
    """Makes verify take a fixed time longer: a sleep on CPU, a calibrated spin on CUDA."""

    def __init__(self, delay_ms: float, device: torch.device) -> None:
        self.delay_ms = delay_ms
        self.cuda_cycles = 0
        if delay_ms > 0 and device.type == "cuda":
            self.cuda_cycles = round(delay_ms * cuda_sleep_cycles_per_ms(device))

    def __call__(self) -> None:
        if self.cuda_cycles:
            # On the current stream, where the probe looks.
            torch.cuda._sleep(self.cuda_cycles)  # type: ignore[no-untyped-call]
        elif self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000)


class SimulatedAcceptance:
    """Accepts each draft with a fixed probability instead of asking the target.

    SGLang's SGLANG_SIMULATE_ACC_LEN idea, per position: along the first-child path of the
    tree, each draft is accepted with probability `rate` while all before it were, so a chain
    of S drafts has an expected accept length of 1 + rate + ... + rate^S. It separates the
    engine's speed from the draft's quality; the outputs are then not the target's greedy ones.
    """

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, batch: int, path_len: int, device: torch.device) -> Tensor:
        """Return how many drafts each sequence accepts this cycle, [B] on device."""
        draws = torch.rand(batch, path_len - 1, generator=self.generator) < self.rate
        return draws.int().cumprod(dim=1).sum(dim=1).to(device)


def simulate_path(
    tree: DraftTree, target_next: Tensor, counts: Tensor, path_len: int
) -> TreeAcceptance:
    """Accept counts [B] drafts along each tree's first-child path, then the bonus token."""
    accepted = first_child_path(tree, path_len) & (tree.depths <= counts.unsqueeze(1))
    return accept_path(tree, accepted, target_next, path_len)


class EagleWorker:
    """Speculation: draft a chain or tree, verify it in ONE target forward, accept, extend."""

    def __init__(
        self,
        target: Transformer,
        drafter: Drafter,
        params: SpecParams,
        verify_delay_ms: float = 0.0,
        simulate_accept_rate: float | None = None,
        seed: int = 0,
        graphs: GraphRunner | None = None,
        slow_phases: Mapping[str, float] | None = None,
        overlap: bool = True,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.params = params
        self.graphs = graphs or GraphRunner()
        self.device = target.output.weight.device
        self.verify_delay = VerifyDelay(verify_delay_ms, self.device)
        # --debug-slow-phase: each named phase longer by a fraction of its own time.
        self.slowdown = PhaseSlowdown(slow_phases or {}, self.device)
        self.simulate = (
            None
            if simulate_accept_rate is None
            else SimulatedAcceptance(simulate_accept_rate, seed)
        )
        self.generator = torch.Generator().manual_seed(seed)  # coins of sampled requests
        self.lookahead = params.lookahead
        self.path_len = params.num_steps + 1  # the root and one node per level, at most
        self.step_hook: Callable[[], None] | None = None  # run before each decode cycle
        # The draft extend queued before the host keeps the accepted tokens (accept's doc);
        # False: after, as --disable-overlap-schedule asks.
        self.overlap = overlap
        # --debug-time-verify-widths: the chain widths to time after the next batch (the
        # engine sets them once its own warm-up is done), and what that timing found.
        self.verify_widths: tuple[int, ...] = ()
        self.verify_ms_by_width: dict[int, float] = {}

    def prefill(self, batch: Batch, prompts: Prompts) -> None:
        """Run the target over the prompts, then the drafter; commit the first tokens."""
        kv_len = batch.kv_len(self.lookahead)
        capture = self.drafter.feature_layers
        logits, hidden = prefill_forward(self.target, self.graphs, prompts, kv_len, capture)
        last = take_columns(logits, prompts.lengths - 1)  # [B, 1, vocab]
        first = next_tokens(last, batch)[:, 0]
        self.drafter.prefill(prompts.ids, prompts.lengths, first, features_of(hidden), kv_len)
        batch.commit(first.unsqueeze(1), torch.ones_like(prompts.lengths), last)

    def cycle(self, batch: Batch) -> int:
        """Run one decode cycle; return the number of tokens committed."""
        with self.slowdown.inside(CYCLE):
            tree = self.draft(batch)
            logits, features = self.verify(batch, tree)
            return self.accept(batch, tree, logits, features).committed

    def draft(self, batch: Batch) -> DraftTree:
        """Propose a draft tree (a chain for topk 1) under each sequence's last token."""
        with self.slowdown.inside(DRAFT):
            kv_len = batch.kv_len(self.lookahead)
            return self.drafter.propose(batch.tokens, batch.lengths, self.params, kv_len)

    def verify(self, batch: Batch, tree: DraftTree) -> tuple[Tensor, Tensor | None]:
        """Run ONE target forward over every tree node, with the tree attention mask.

        Returns the logits [B, N, vocab] (row i: the target's distribution after node i) and
        the features [B, N, 3·dim] for the drafter's extend.
        """
        with self.slowdown.inside(VERIFY):
            logits, *hidden = self._verify_forward(batch, tree)
            self.verify_delay()
            return logits, features_of(hidden)

    def _verify_forward(self, batch: Batch, tree: DraftTree) -> tuple[Tensor, ...]:
        """The target's forward over the tree's nodes: logits, then the captured hiddens."""
        kv_len = batch.kv_len(self.lookahead)
        capture = self.drafter.feature_layers

        def forward(lengths: Tensor, *tree_tensors: Tensor) -> tuple[Tensor, ...]:
            nodes = DraftTree(*tree_tensors)
            positions, view = tree_attention(nodes, lengths, kv_len, self.params.topk == 1)
            logits, hidden = self.target(nodes.tokens, positions, view, capture)
            return (logits, *hidden)

        return self.graphs.run(("verify", kv_len), forward, batch.lengths, *tree)

    def time_verify_widths(
        self, batch: Batch, widths: Sequence[int], replays: int
    ) -> dict[int, float]:
        """The verify forward's mean ms at each chain width (tokens a sequence) and at the
        run's own, on a finished batch's state: the chain drafted there, cut to each width.

        `perfgate plan` predicts narrower chains from one run, and a chain's width is fixed
        per launch: this measures how verify grows with it inside the launch. Each width runs
        its own graph (a forward per shape); the widths take turns, `replays` rounds, so a
        drift of the machine falls on all alike. The slots written lie past every sequence's
        length, in a batch that is done: nothing reads them before they are written again.
        """
        kv_len = batch.kv_len(self.lookahead)
        tree = self.drafter.propose(batch.tokens, batch.lengths, self.params, kv_len)
        chains = {
            w: DraftTree(
                tree.tokens[:, :w],
                tree.parents[:, :w],
                tree.ancestors[:, :w, :w],
                tree.depths[:, :w],
            )
            for w in sorted({*widths, self.params.num_draft_tokens})
        }
        spent = dict.fromkeys(chains, 0.0)
        for chain in chains.values():  # capture (or warm) each width's forward first
            self._verify_forward(batch, chain)
        for _ in range(replays):
            for width, chain in chains.items():
                self._sync()
                started = time.perf_counter()
                self._verify_forward(batch, chain)
                self._sync()
                spent[width] += time.perf_counter() - started
        return {width: seconds * 1e3 / replays for width, seconds in spent.items()}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def accept(
        self, batch: Batch, tree: DraftTree, logits: Tensor, features: Tensor | None
    ) -> Accepted:
        """Keep the longest path of drafts the target agrees with, plus its bonus token.

        The draft extend runs inside, between the device's commit and the host's: queued
        before the cycle's one sync, it keeps the GPU busy while the host waits for the
        accepted tokens and keeps them. The probe charges it to draft_extend, not to accept
        (a phase inside another is subtracted from it). Without overlap, the host keeps the
        tokens first and the extend follows, on an idle GPU.
        """
        kv_len = batch.kv_len(self.lookahead)  # the cycle's, before this commit
        with self.slowdown.inside(ACCEPT):
            acceptance, path_logits = self.decide(batch, tree, logits)
            starts = batch.lengths
            if self.params.topk > 1:
                self.compact_cache(starts, acceptance.path)
            committing = batch.start_commit(
                acceptance.committed,
                acceptance.num_correct + 1,
                path_logits,
                acceptance.num_correct,
            )
            # Like SGLang's, no draft extend once every request is finished; where that is
            # known only after the sync, the last cycle's extend is queued and unused.
            if self.overlap and not batch.ends_with_next_commit():
                with self.slowdown.aside(ACCEPT):
                    self.draft_extend(acceptance, starts, features, kv_len)
            committed = batch.finish_commit(committing)
            if not self.overlap and not batch.done:
                with self.slowdown.aside(ACCEPT):
                    self.draft_extend(acceptance, starts, features, kv_len)
        return Accepted(acceptance, starts, committed, *batch.verified)

    def decide(self, batch: Batch, tree: DraftTree, logits: Tensor) -> Decided:
        """On the device: which drafts each sequence accepts, its tokens and their logits."""
        counts: tuple[Tensor, ...] = ()
        if self.simulate is not None:
            counts = (self.simulate.draw(tree.tokens.shape[0], self.path_len, self.device),)
        sampled = sampling_inputs(batch, tree.size)

        def decide(logits: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
            # The target's own choice after each node (its argmax, or its sample: one coin per
            # node): a draft is right when it is that choice after its parent, and the first
            # wrong draft ends its path, since every later draft was conditioned on a wrong
            # token. The bonus is the target's token after the last accepted node, so every
            # verify pass yields at least one token.
            nodes = DraftTree(*inputs[:4])
            target_next = choose_in_graph(logits, inputs[4 : 4 + len(sampled)], self.target)
            if counts:
                acceptance = simulate_path(nodes, target_next, inputs[-1], self.path_len)
            else:
                acceptance = verify_greedy(nodes, target_next, self.path_len)
            vocab = logits.shape[-1]
            path_logits = logits.gather(1, acceptance.path.unsqueeze(-1).expand(-1, -1, vocab))
            return (*acceptance, path_logits)

        site = ("accept", bool(sampled))
        *decided, path_logits = self.graphs.run(site, decide, logits, *tree, *sampled, *counts)
        return Decided(TreeAcceptance(*decided), path_logits)

    def compact_cache(self, starts: Tensor, path: Tensor) -> None:
        """Move each accepted tree node's KV entries to the position it was accepted at.

        Node path[k] was written to slot start + path[k]; the next forward expects the k-th
        accepted token at position start + k. A chain's nodes are in place already. Later
        slots hold stale entries, overwritten before any query sees them. Run eagerly: a
        graph's warm-up would move the entries twice.
        """
        steps = torch.arange(path.shape[1], device=path.device)
        self.target.copy_slots(starts.unsqueeze(1) + path, starts.unsqueeze(1) + steps)

    def draft_extend(
        self, acceptance: TreeAcceptance, starts: Tensor, features: Tensor | None, kv_len: int
    ) -> None:
        """Run the drafter over the accepted tokens with the target's true features."""
        with self.slowdown.inside(DRAFT_EXTEND):
            path = acceptance.path
            path_features = None
            if features is not None:
                path_features = features.gather(
                    1, path.unsqueeze(-1).expand(-1, -1, features.shape[-1])
                )
            self.drafter.extend(
                acceptance.committed, path_features, starts, acceptance.num_correct, kv_len
            )

    def check(self, request: Request) -> None:
        """Raise RequestError unless this request, drafts included, fits the models."""
        max_seq_len = min(self.target.max_seq_len, self.drafter.model.max_seq_len)
        check_request(request, max_seq_len, self.lookahead)

    @torch.inference_mode()
    def generate(
        self, requests: Sequence[Request], on_step: Callable[[Batch], None] | None = None
    ) -> list[Generation]:
        """Decode a batch of requests together, up to num_steps + 1 tokens each per cycle;
        on_step sees the batch after the prefill and after every cycle."""
        step_done = on_step or _nothing
        for request in requests:
            self.check(request)
        batch = Batch(requests, self.device, self.target.max_seq_len, self.generator)
        slots = batch.kv_len(self.lookahead, final=True)
        replaced = self.target.ensure_cache(len(requests), slots)
        if self.drafter.model.ensure_cache(len(requests), slots) or replaced:
            self.graphs.reset()
        cycles = 0
        if not batch.done:
            self.prefill(batch, pad_prompts(requests, self.device))
            step_done(batch)
        while not batch.done:
            if self.step_hook is not None:  # a profiler's, while one is asked for
                self.step_hook()
            self.cycle(batch)
            cycles += 1
            step_done(batch)
        if self.verify_widths and not self.verify_ms_by_width and cycles:
            self.verify_ms_by_width = self.time_verify_widths(
                batch, self.verify_widths, WIDTH_REPLAYS
            )
        return batch.generations()
