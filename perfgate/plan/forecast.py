"""Predict a chain's figures at every step count up to the one a run drafted. Pure.

One speculative run of a chain (``topk = 1``) at ``N`` steps gives, per repeat, its time and
tokens, every timed cycle's phase costs, and for each sequence of the batch the draft tokens
it accepted in each timed cycle: its *acceptance depths*. At ``k <= N`` steps the model says:

- **Acceptance.** A chain of ``k`` drafts accepts ``min(d, k)`` where the chain of ``N``
  accepted ``d``: its drafts are the first ``k`` of the longer chain's (each drafted from the
  same context), and verification keeps the longest correct prefix. A sequence's cycles at
  ``k`` are the expected number of cycles that make its tokens after the first (which comes
  from prefill), each making ``1 + min(d, k)`` tokens, ``d`` drawn from its depths (the
  renewal equation: a last cycle's tokens past the budget count in no output). A batch
  decodes until its slowest sequence is done, so the batch's cycles at ``k`` are the
  expected *slowest* count at ``k``: the largest of the sequences' counts, each a random
  number of cycles, normal by the renewal theorem (mean the equation's, variance
  ``r s2 / m3`` for ``r`` tokens made ``m`` a cycle on average, ``s2`` their variance), not
  the largest of their means. At many steps a cycle makes 1 to ``N + 1`` tokens and the
  counts scatter, so the slowest of eight runs well past the mean; at one step they hardly
  scatter. To that is added what the run's own count at ``N`` exceeded the model's slowest
  there, in proportion to the counts' spread at ``k`` over that at ``N`` (``batch_cycles``):
  where acceptance clusters the counts scatter more than independent cycles make them, and
  the slowest's lead grows with the spread. On an H100's trained head the run ran 55.2
  cycles at 10 steps against the model's 52.1, and the sweeps' batches at 1 to 3 steps
  133.6, 93.6 and 72.8: this gives 135.1, 94.3 and 73.7. Scaling the run's count by the
  ratio of the slowest counts instead carried the whole excess down (141.6 at one step, tok/s
  5.1-5.5% low in three rounds); the largest of the means, 8.3% low
  (benchmarks/results/plan-h100-trained.md).
  ``accept_length`` is all the sequences' tokens over all their cycles, as SGLang counts it
  (``completion_tokens / spec_verify_ct``). Where the probe timed one cycle in a few (its
  stride, 4 on a GPU), each sequence's depths are a sample: its tokens are then the repeat's
  own (each its budget's, or the repeat's shared out as the samples say), and
  its depths are drawn toward the batch's as far as they cannot tell it apart (Buhlmann's
  credibility), since a noisy sample of a few dozen cycles makes too many of them.
  Each cycle is drawn independently of the one before. Where acceptance clusters, a short
  chain stops inside an easy stretch and its next cycle starts there, where the long chain's
  starts after a failed draft, so short chains accept somewhat more than this says (-2.6% at
  1 step of 6 on 64 prompts of the tiny models: benchmarks/results/accept-context-cpu.md).
- **Cost per cycle**, phase by phase:

  - ``draft``: a chain of ``k`` steps runs ``k - 1`` draft forwards (its first token comes
    from the previous cycle's draft extend, in SGLang and the embedded engine alike), so
    ``draft(k) = draft(N) * (k - 1) / (N - 1)``; what does not grow with the steps (building
    the chain's tree) is left out.
  - ``verify`` and ``accept``, the target's side of the cycle, work on the chain's ``k + 1``
    tokens per sequence. Where the run timed its verify forward at two widths or more
    (``Observation.verify_ms_by_width``: the embedded engine's --debug-time-verify-widths),
    ``verify`` is the run's own scaled along the least-squares line through those timings,
    and ``accept`` as measured. Otherwise, together they are linear in that width, through the
    run's own (``N + 1``) and the plain twin's decode step, the same target over the same
    batch at one token per sequence (a forward, its sampling and the commit of its tokens).
    ``accept`` is taken as measured and ``verify`` is the rest. Without the plain twin's
    step, both are taken as measured (flat).
  - ``draft_extend`` runs the draft model over the same ``k + 1`` tokens: linear in that
    width, through the run's own and one draft forward (a token per sequence: the draft
    phase's cost per forward).
  - ``other`` (the cycle less its named phases): as measured.

- **Time.** A repeat's time less its cycles' time (prefill, the request, the gaps between
  cycles) stays as measured; its cycles at ``k`` take their number at ``k`` times the cycle at
  ``k``. ``output_tok_s`` is the repeat's tokens over that time, the median over repeats (as a
  run reports it); ``speedup`` is over the plain twin's median tok/s.

At ``k = N`` the model gives the run's own figures back. A step count above ``N`` is not
predicted: the run cannot say how often a longer chain's extra drafts would be accepted.

**Refit.** Once other step counts are measured (a plan's confirmations), their phase costs
replace the lines' guesses: each phase's cost, and the rest of the cycle, becomes the
least-squares line in ``k`` through the run's own and every measured step count's mean ms
per cycle (never below zero; at ``N`` too, where the line need not pass through the run's
own point), and the plain twin's step is no longer used. It exists because
the plain step is not a one-token verify everywhere: on a CPU the speculative server's verify
carries a fixed cost of its own, which a line through the plain step leaves out, so it
underestimates short chains (benchmarks/results/plan-cpu.md). Acceptance still comes from the
run's depths alone: a ``Forecast`` draws the bootstrap and solves the acceptance once, and
each prediction from it (the first, then a refit per confirmation) only costs its lines.

Every figure has an interval: a percentile bootstrap (seeded, so a plan is reproducible) that
draws the repeats, the cycles of each phase's costs and each sequence's depths with
replacement, and the plain twin's repeats. Before a refit, each draw also puts draft extend,
and verify where it was not timed at two widths, at a uniform draw between their line and
the run's own cost (flat in the
width): a narrower chain cannot cost more than the profiled one, and the line is a guess
that missed on both machines measured (below its mark at short chains: verify at 2 tokens
1.16 ms on the line against 1.58 measured on an H100, 1.71-2.04 against 2.27-2.86 on a CPU), so
the interval says how far a short chain's figures rest on it. The prediction stays on the
line, at one end of that range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from perfgate.errors import ConfigError
from perfgate.metrics import ACCEPT, CYCLE, DRAFT, DRAFT_EXTEND, NAMED_PHASES, VERIFY

COSTS = (*NAMED_PHASES, CYCLE)  # the columns of a cycle's costs
FIGURES = (
    "output_tok_s",
    "speedup",
    "accept_length",
    "cycle_ms",
    "draft_ms",
    "verify_ms",
    "draft_extend_ms",
    "accept_ms",
    "verify_share",
)
CONFIDENCE = 0.95
REPLICATES = 1000

Costs = Mapping[str, float]  # one timed cycle: milliseconds per phase, `cycle` included
Array = NDArray[np.float64]


@dataclass(frozen=True)
class Repeat:
    """One timed repeat of the profiled run."""

    elapsed_s: float
    tokens: int  # output tokens of every sequence together
    cycles: tuple[Costs, ...]  # its timed cycles
    depths: tuple[tuple[int, ...], ...]  # per sequence, the drafts it accepted per timed cycle
    every: int = 1  # the probe timed one cycle in this many


@dataclass(frozen=True)
class Measured:
    """A step count measured besides the profiled one: per repeat, each phase's mean ms per
    cycle (``cycle`` included)."""

    steps: int
    repeats: tuple[Costs, ...]


@dataclass(frozen=True)
class Observation:
    """What the profiled run measured: the model's input."""

    steps: int
    sequences: int  # of each repeat's batch
    repeats: tuple[Repeat, ...]
    budget: int | None = None  # max new tokens per sequence; None: as many as each made
    plain_tok_s: tuple[float, ...] = ()  # the plain twin's, per repeat
    plain_step_ms: tuple[float, ...] = ()  # its mean decode step, per repeat
    # The verify forward's ms at two or more chain widths (tokens a sequence), the run's own
    # among them, as the profiled server timed it (the embedded engine's
    # --debug-time-verify-widths); empty where it was not timed.
    verify_ms_by_width: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Estimate:
    """A figure and its interval."""

    value: float
    low: float
    high: float

    def as_list(self) -> list[float | None]:
        return [v if math.isfinite(v) else None for v in (self.value, self.low, self.high)]


@dataclass(frozen=True)
class PredictedPoint:
    steps: int
    figures: Mapping[str, Estimate]

    def __getitem__(self, figure: str) -> Estimate:
        return self.figures[figure]


@dataclass(frozen=True)
class Prediction:
    """Every step count's figures, from the run at `steps_run`."""

    steps_run: int
    points: tuple[PredictedPoint, ...]  # steps 1..steps_run
    seed: int
    replicates: int
    notes: tuple[str, ...] = field(default=())

    def ranked(self) -> list[PredictedPoint]:
        """The step counts, fastest predicted first."""
        return sorted(self.points, key=lambda p: -_finite(p["output_tok_s"].value))

    def best(self) -> PredictedPoint:
        return self.ranked()[0]

    def at(self, steps: int) -> PredictedPoint:
        """The prediction at `steps`; a ConfigError for a step count the run did not draft."""
        refuse_unobserved(self, steps)
        return next(p for p in self.points if p.steps == steps)


def predict(
    observation: Observation,
    seed: int = 0,
    replicates: int = REPLICATES,
    measured: Sequence[Measured] = (),
) -> Prediction:
    """Predict steps 1..N from a run at N (see the module doc); refuse what cannot hold."""
    return Forecast.of(observation, seed, replicates).predict(measured)


@dataclass(frozen=True)
class Forecast:
    """An observation's bootstrap draws and their acceptance solved, once: what every
    prediction from it shares, the first and each refit (which changes the costs alone)."""

    observation: Observation
    seed: int
    replicates: int
    drawn: tuple[_Arrays, ...]  # the observation, then each replicate
    cycles: tuple[Array, ...]  # per draw, expected_cycles of its rows
    batch_cycles: tuple[Array, ...]  # per draw, batch_cycles of its repeats [R, N]

    @classmethod
    def of(cls, observation: Observation, seed: int = 0, replicates: int = REPLICATES) -> Forecast:
        check_observation(observation)
        base = _Arrays.of(observation)
        rng = np.random.default_rng(seed)
        drawn = (base, *(base.resampled(rng) for _ in range(replicates)))
        # One renewal solution for the rows of every draw at once, then split per draw.
        counts = np.concatenate([a.counts for a in drawn])
        remaining = np.concatenate([a.remaining for a in drawn])
        solved = expected_cycles(counts, remaining)
        bounds = np.cumsum([0, *(len(a.counts) for a in drawn)])
        cycles = tuple(solved[bounds[i] : bounds[i + 1]] for i in range(len(drawn)))
        # Each draw's repeats numbered apart, so every batch's slowest is solved at once too.
        offsets = np.cumsum([0, *(len(a.tokens) for a in drawn)])
        batch = np.concatenate([a.repeat + offsets[i] for i, a in enumerate(drawn)])
        spread = cycle_spread(counts, remaining)
        slowest = expected_slowest(solved, spread, batch)
        spreads = batch_means(spread, batch)
        batches = tuple(
            batch_cycles(
                a.run_cycles,
                slowest[offsets[i] : offsets[i + 1]],
                spreads[offsets[i] : offsets[i + 1]],
            )
            for i, a in enumerate(drawn)
        )
        return cls(observation, seed, replicates, drawn, cycles, batches)

    def predict(self, measured: Sequence[Measured] = ()) -> Prediction:
        """Every step count's figures; with `measured`, the costs refit (the module doc)."""
        steps = self.observation.steps
        check_measured(measured, steps)
        # The measured repeats' own draws, apart from the observation's: the same
        # acceptance draws under every refit.
        rng = np.random.default_rng([self.seed, 1])
        matrices = [(m.steps, _cost_matrix(m.repeats, COSTS)) for m in measured]
        costs = [
            matrices if i == 0 else [(k, _redraw_rows(rows, rng)) for k, rows in matrices]
            for i in range(len(self.drawn))
        ]
        # Where a width's cost is a line's guess (no refit), each draw's between the line
        # and flat; the prediction itself on the line. A refit measures it: no draw.
        widths = np.zeros(len(self.drawn))
        if not measured:
            widths[1:] = np.random.default_rng([self.seed, 2]).uniform(size=len(self.drawn) - 1)
        scales = verify_scales(self.observation.verify_ms_by_width, steps)
        figures = [
            _figures(a, c, b, m, float(u), scales)
            for a, c, b, m, u in zip(
                self.drawn, self.cycles, self.batch_cycles, costs, widths, strict=True
            )
        ]
        points = []
        for index, k in enumerate(range(1, steps + 1)):
            estimates = {
                name: _estimate(figures[0][index][name], [f[index][name] for f in figures[1:]])
                for name in FIGURES
            }
            points.append(PredictedPoint(k, estimates))
        prediction = Prediction(steps, tuple(points), self.seed, self.replicates)
        return replace(prediction, notes=_notes(self.observation, prediction, measured))


def check_observation(observation: Observation) -> None:
    """Refuse a run the model cannot predict from, naming why (exit 64)."""
    steps = observation.steps
    if steps < 2:
        raise ConfigError(
            f"a run at {steps} step(s) leaves nothing shorter to predict",
            field="--steps",
            fix="profile at more steps than you want to choose among, e.g. --steps 8",
        )
    depths = [d for r in observation.repeats for seq in r.depths for d in seq]
    if not depths:
        raise ConfigError(
            "the run recorded no acceptance depths: the probe's table for this engine does not "
            "say what each sequence accepted (perfgate/probe/targets.py)",
            field="--scenario",
            fix="measure the step counts with `perfgate sweep` instead",
        )
    if max(depths) > steps or min(depths) < 0:
        raise ConfigError(
            f"the run's cycles accepted {min(depths)} to {max(depths)} drafts of chains of "
            f"{steps}: not a chain of {steps} steps",
            field="--steps",
            fix="plan chains only (topk = 1, draft tokens = steps + 1)",
        )
    if not all(r.cycles and any(r.depths) for r in observation.repeats):
        raise ConfigError(
            "a repeat of the run has no timed cycles with acceptance depths",
            field="--repeats",
            fix="run more tokens per repeat (max_new_tokens)",
        )


def check_measured(measured: Sequence[Measured], steps: int) -> None:
    """Refuse a measured step count the refit cannot use, naming why (exit 64)."""
    for other in measured:
        if not 1 <= other.steps <= steps or not other.repeats:
            raise ConfigError(
                f"steps {other.steps} measured to refit the costs: "
                + (f"not in 1..{steps}" if other.repeats else "no repeat timed its phases"),
                field="--steps",
                fix=f"refit with step counts 1 to {steps} whose phases the probe timed",
            )


def refuse_unobserved(prediction: Prediction, steps: int) -> None:
    """Refuse a step count the run could not observe (above the steps it drafted)."""
    if not 1 <= steps <= prediction.steps_run:
        raise ConfigError(
            f"steps {steps} was not observed: the run drafted chains of "
            f"{prediction.steps_run}, and cannot say how often a longer chain's drafts "
            "would be accepted",
            field="--steps",
            fix=f"profile at {max(steps, 2)} steps or more",
        )


def _notes(
    observation: Observation, prediction: Prediction, measured: Sequence[Measured]
) -> tuple[str, ...]:
    """What a reader should know of how far the prediction holds."""
    notes = []
    if measured:
        seen = sorted({m.steps for m in measured} | {observation.steps})
        notes.append(
            "each phase's cost refit through the step counts measured ("
            + ", ".join(map(str, seen))
            + "): the least-squares line in the steps"
        )
    elif len(observation.verify_ms_by_width) >= 2:
        timed = ", ".join(f"{ms:.3f} ms at {w}" for w, ms in observation.verify_ms_by_width)
        notes.append(
            f"verify from the run's own timing of its forward at each width ({timed} tokens a "
            "sequence): the run's verify scaled along the line through them"
        )
    elif not observation.plain_step_ms:
        notes.append(
            "the plain twin's decode step was not timed: verify and accept are taken as flat "
            "in the chain's tokens"
        )
    depths = [d for r in observation.repeats for seq in r.depths for d in seq]
    every = sum(d == observation.steps for d in depths) / len(depths)
    if prediction.best().steps == observation.steps and every > 0:
        notes.append(
            f"the fastest predicted is the profiled {observation.steps} steps, and {every:.0%} "
            "of its cycles accepted every draft: a longer chain may be faster still, which "
            "this run cannot see; profile at more steps (--steps)"
        )
    return tuple(notes)


@dataclass(frozen=True)
class _Arrays:
    """An observation as arrays, or one bootstrap draw of it.

    Its sequences are the rows of every repeat together: `counts` [rows, steps + 1] holds how
    many of a row's cycles accepted d drafts, `remaining` [rows] its tokens after the first,
    and `repeat` [rows] the repeat it belongs to.
    """

    steps: int
    elapsed_s: Array  # [R]
    tokens: Array  # [R]
    run_cycles: Array  # [R]: cycles each repeat ran (timed ones times the stride)
    costs: Array  # [cycles, len(COSTS)]: the repeats' timed cycles, pooled
    counts: Array  # [rows, steps + 1]
    remaining: Array  # [rows]
    repeat: NDArray[np.int64]  # [rows]
    plain: Array  # [plain repeats]: tok/s
    plain_step: Array  # [plain repeats]: mean decode step ms (empty where not timed)

    @classmethod
    def of(cls, observation: Observation) -> _Arrays:
        repeats, steps = observation.repeats, observation.steps
        counts = [_depth_counts(r.depths, steps) for r in repeats]
        budget = observation.budget
        return cls(
            steps=steps,
            elapsed_s=np.array([r.elapsed_s for r in repeats], dtype=np.float64),
            tokens=np.array([r.tokens for r in repeats], dtype=np.float64),
            run_cycles=np.array([len(r.cycles) * r.every for r in repeats], dtype=np.float64),
            costs=_cost_matrix([c for r in repeats for c in r.cycles], COSTS),
            counts=_credible(np.concatenate(counts), max(r.every for r in repeats)),
            remaining=np.concatenate(
                [
                    _remaining(c, r.every, budget, r.tokens, observation.sequences)
                    for c, r in zip(counts, repeats, strict=True)
                ]
            ),
            repeat=np.concatenate([np.full(len(c), i) for i, c in enumerate(counts)]),
            plain=np.array(observation.plain_tok_s, dtype=np.float64),
            plain_step=np.array(observation.plain_step_ms, dtype=np.float64),
        )

    def resampled(self, rng: np.random.Generator) -> _Arrays:
        """One bootstrap draw: repeats, cycles, each sequence's depths, plain repeats."""
        picked = rng.integers(0, len(self.tokens), len(self.tokens))
        members = [np.flatnonzero(self.repeat == r) for r in picked]
        rows = np.concatenate(members)
        plain = rng.integers(0, len(self.plain), len(self.plain))
        steps = rng.integers(0, len(self.plain_step), len(self.plain_step))
        return _Arrays(
            steps=self.steps,
            elapsed_s=self.elapsed_s[picked],
            tokens=self.tokens[picked],
            run_cycles=self.run_cycles[picked],
            costs=_redraw_rows(self.costs, rng),
            counts=_redraw_counts(self.counts[rows], rng),
            remaining=self.remaining[rows],
            repeat=np.concatenate([np.full(len(m), i) for i, m in enumerate(members)]),
            plain=self.plain[plain],
            plain_step=self.plain_step[steps],
        )


def _cost_matrix(cycles: Sequence[Costs], phases: Sequence[str]) -> Array:
    return np.array([[c.get(p, 0.0) for p in phases] for c in cycles], dtype=np.float64).reshape(
        len(cycles), len(phases)
    )


def _depth_counts(depths: Sequence[Sequence[int]], steps: int) -> Array:
    """[sequences, steps + 1]: how many of each sequence's cycles accepted d drafts."""
    rows = [np.bincount(np.asarray(seq, dtype=np.int64), minlength=steps + 1) for seq in depths]
    rows = [row for row in rows if row.sum()]
    return np.array(rows, dtype=np.float64).reshape(len(rows), steps + 1)


def _credible(counts: Array, every: int) -> Array:
    """[rows, steps + 1]: each sequence's depth counts, drawn toward the batch's where they
    are a sample.

    Where the probe timed every cycle, a row's counts are what the sequence did: kept. Where it
    timed one cycle in `every`, they are a sample of a few dozen, and a sequence's cycles to its
    budget, a convex function of its acceptance, come out high on average from a noisy one
    (Jensen: -1.4 to -5.6% of accept length at strides 4 and 8 on test_forecast.py's
    `sampled_every` without the blend, three seeds each). So each row's distribution becomes
    Buhlmann's credibility blend, ``Z * its own + (1 - Z) * the batch's``,
    ``Z = n / (n + s2 / t2)``: ``n`` its timed cycles, ``s2`` the depth's variance within a
    sequence, ``t2`` the variance of the sequences' true mean depths (Buhlmann-Straub's
    estimate, 0 where the spread between sequences is no more than their sampling spread: then
    all share the batch's). A sequence keeps its own acceptance as far as its cycles tell it
    apart from the batch.
    """
    if every == 1 or len(counts) < 2:
        return counts
    depth = np.arange(counts.shape[1], dtype=np.float64)
    n = counts.sum(axis=1)
    mean = (counts * depth).sum(axis=1) / n
    within = (counts * (depth - mean[:, None]) ** 2).sum(axis=1) / np.maximum(n - 1, 1)
    total = n.sum()
    s2 = float(((n - 1) * within).sum() / max(total - len(n), 1))
    grand = float((n * mean).sum() / total)
    between = float((n * (mean - grand) ** 2).sum()) - (len(n) - 1) * s2
    t2 = between / (total - float((n**2).sum()) / total)
    pooled = counts.sum(axis=0) / total
    if t2 <= 0:  # the sequences part no more than their samples do: all the batch's
        weight = np.zeros_like(n)
    elif s2 <= 0:  # every sequence's cycles agree: each its own
        weight = np.ones_like(n)
    else:
        weight = n / (n + s2 / t2)
    own = counts / n[:, None]
    blended: Array = (weight[:, None] * own + (1 - weight[:, None]) * pooled) * n[:, None]
    return blended


def _remaining(counts: Array, every: int, budget: int | None, tokens: int, sequences: int) -> Array:
    """[sequences]: the tokens each made after its first.

    Where the probe timed every cycle, its cycles' (a bonus and the drafts accepted, each),
    at most the budget's. Where it timed one cycle in `every`, the timed ones times the
    stride only say how the repeat's tokens split between its sequences: capped at the
    budget, such a guess loses its long errors and keeps its short ones, so the sequences
    would seem to make fewer tokens than they did, in fewer cycles, and every accept length
    would come out long (+4.5% at stride 4 on an H100, benchmarks/results/plan-h100-seeded.md).
    So the repeat's own count of tokens (all its sequences', less each one's first) is shared
    out in proportion to the guesses; where every sequence made its whole budget, each made
    exactly that.
    """
    made: Array = (counts * (1 + np.arange(counts.shape[1]))).sum(axis=1)
    if every == 1:
        return np.minimum(made, budget - 1) if budget is not None else made
    rows = len(made)
    if budget is not None and tokens == sequences * budget:
        return np.full(rows, float(budget - 1))
    after_first = (tokens - sequences) * rows / sequences  # of these rows, if some had no draw
    shared = made * (after_first / made.sum()) if made.sum() else made
    return np.minimum(shared, budget - 1) if budget is not None else shared


def _redraw_counts(counts: Array, rng: np.random.Generator) -> Array:
    totals = counts.sum(axis=1)
    drawn = rng.multinomial(totals.astype(np.int64), counts / totals[:, None])
    return drawn.astype(np.float64)


def _redraw_rows(rows: Array, rng: np.random.Generator) -> Array:
    return rows[rng.integers(0, len(rows), len(rows))] if len(rows) else rows


# The arrays below are worked a block at a time, each block's buffers small enough to stay in
# a CPU's cache: the same operations in the same order as on the whole array, so the same bits.
CYCLE_ROWS = 2048  # rows expected_cycles and expected_slowest solve at a time
CDF_CHUNK = 1 << 15  # elements _normal_cdf works on at a time
SQRT2 = math.sqrt(2.0)


def expected_cycles(counts: Array, remaining: Array) -> Array:
    """[rows, steps + 1]: column k is the expected cycles a chain of k steps takes to make each
    row's `remaining` tokens, each cycle making ``1 + min(d, k)`` with ``d`` drawn from the
    row's depths (`counts` [rows, steps + 1]); column 0 is unused (zero).

    The renewal equation ``E(r) = 1 + sum over x of P(x) E(r - x)``, ``E(r <= 0) = 0``,
    solved for every row and every k at once.

    >>> expected_cycles(np.array([[0.0, 0.0, 2.0]]), np.array([7.0]))[0].tolist()
    [0.0, 4.0, 3.0]
    """
    rows, steps = counts.shape[0], counts.shape[1] - 1
    probs = counts / counts.sum(axis=1, keepdims=True)
    # makes[x - 1, k - 1, row]: the chance that a cycle at k steps makes x = 1 + min(d, k)
    # tokens; zero for k < x - 1, so the sum below skips those columns (a row per k, each
    # contiguous over the rows).
    makes = np.zeros((steps + 1, steps, rows))
    for k in range(1, steps + 1):
        makes[:k, k - 1, :] = probs[:, :k].T
        makes[k, k - 1, :] = probs[:, k:].sum(axis=1)
    wanted = np.clip(np.rint(remaining).astype(np.int64), 0, None)
    cycles = np.zeros((steps, rows))
    for start in range(0, rows, CYCLE_ROWS):  # a block of rows at a time: its ring stays in cache
        block = slice(start, start + CYCLE_ROWS)
        cycles[:, block] = _renewal(np.ascontiguousarray(makes[:, :, block]), wanted[block])
    # Row-major, as the figures' sums over rows expect it: another layout sums in another order.
    solved = np.zeros((rows, steps + 1))
    solved[:, 1:] = cycles.T
    return solved


def _renewal(makes: Array, wanted: NDArray[np.int64]) -> Array:
    """[steps, rows]: E(wanted) of each row at each k, by expected_cycles' equation."""
    steps, rows = makes.shape[1], makes.shape[2]
    cycles = np.zeros((steps, rows))
    # ring[r % (steps + 2)] is E(r), E(r <= 0) = 0: E(r) is written while E(r - steps - 1) is read
    ring = np.zeros((steps + 2, steps, rows))
    term = np.empty((steps, rows))
    for r in range(1, int(wanted.max(initial=0)) + 1):
        now = ring[r % (steps + 2)]
        now.fill(1.0)
        for x in range(1, min(r, steps + 2)):
            first = max(x - 2, 0)
            product = term[first:]
            np.multiply(makes[x - 1, first:], ring[(r - x) % (steps + 2), first:], out=product)
            now[first:] += product
        done = wanted == r
        cycles[:, done] = now[:, done]
    return cycles


def cycle_spread(counts: Array, remaining: Array) -> Array:
    """[rows, steps + 1]: the standard deviation of the cycles a chain of k steps takes to make
    each row's `remaining` tokens (column k; column 0 unused, zero), by the renewal theorem:
    ``sqrt(r s2 / m**3)`` where a cycle makes ``1 + min(d, k)`` tokens, ``m`` on average with
    variance ``s2``.

    >>> cycle_spread(np.array([[1.0, 1.0]]), np.array([150.0]))[0, 1].round(6)  # m 1.5
    np.float64(3.333333)
    """
    steps = counts.shape[1] - 1
    probs = counts / counts.sum(axis=1, keepdims=True)
    depth = np.arange(steps + 1, dtype=np.float64)
    made = 1 + np.minimum(depth[None, :], depth[1:, None])  # [k - 1, d]: tokens a cycle makes
    mean = probs @ made.T  # [rows, k - 1]
    square = probs @ (made**2).T
    variance = np.maximum(square - mean**2, 0.0)
    spread = np.sqrt(np.clip(remaining, 0, None)[:, None] * variance / mean**3)
    return np.concatenate([np.zeros((len(counts), 1)), spread], axis=1)


GRID = 33  # points of the integral in expected_slowest: to 1e-7 of a cycle on eight normals


def expected_slowest(cycles: Array, spread: Array, batch: NDArray[np.int64]) -> Array:
    """[batches, steps + 1]: the expected largest cycle count of each batch's rows, every row's
    count normal with mean `cycles` and standard deviation `spread` (its rows' expected_cycles
    and cycle_spread), the rows independent; `batch` [rows] numbers the batches from 0, each
    one's rows contiguous. ``E max = hi - integral from lo to hi of P(max <= x) dx``, where no
    row's count falls outside ``mean +- 6 sd`` (the largest lies above every row's low end).

    >>> expected_slowest(np.array([[0, 10.0], [0, 10.0]]), np.array([[0, 1.0], [0, 1.0]]),
    ...                  np.array([0, 0]))[0, 1].round(3)
    np.float64(10.564)
    """
    starts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
    lo = np.maximum.reduceat(cycles - 6 * spread, starts, axis=0)  # [B, K]
    hi = np.maximum.reduceat(cycles + 6 * spread, starts, axis=0)
    t = np.linspace(0.0, 1.0, GRID)
    x = lo[..., None] + (hi - lo)[..., None] * t  # [B, K, G]
    sd = np.where(spread > 0, spread, 1.0)[..., None]
    joint = np.empty_like(x)  # [B, K, G]: P(max <= x)
    ends = np.r_[starts[1:], len(batch)]
    first = 0
    while first < len(starts):  # whole batches of about CYCLE_ROWS rows at a time
        last = max(first + 1, int(np.searchsorted(starts, starts[first] + CYCLE_ROWS)))
        part = slice(starts[first], ends[last - 1])
        below = np.where(
            spread[part, :, None] > 0,
            _normal_cdf((x[batch[part]] - cycles[part, :, None]) / sd[part]),
            1.0,
        )  # a row that does not scatter is below every x >= its count, which lo is
        joint[first:last] = np.multiply.reduceat(below, starts[first:last] - starts[first], axis=0)
        first = last
    width = (hi - lo)[..., None] / (GRID - 1)
    area = (width * (joint[..., 1:] + joint[..., :-1]) / 2).sum(axis=-1)
    expected: Array = hi - area
    return expected


def batch_means(values: Array, batch: NDArray[np.int64]) -> Array:
    """[batches, columns]: the mean of each batch's rows of `values` (rows contiguous)."""
    starts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
    sizes = np.diff(np.r_[starts, len(batch)])
    means: Array = np.add.reduceat(values, starts, axis=0) / sizes[:, None]
    return means


def batch_cycles(run_cycles: Array, slowest: Array, spread: Array) -> Array:
    """[repeats, N]: the cycles each repeat's batch takes at k = 1..N steps: its expected
    slowest count at k (`slowest` [R, N + 1], expected_slowest), plus what the run's own count
    at N (`run_cycles` [R]) exceeded the model's there, carried to k in proportion to the
    spread of the counts (`spread` [R, N + 1], the batch's mean cycle_spread): a slowest
    count's lead over the mean grows with the spread, and the renewal model, each cycle drawn
    on its own, makes the spread too small where acceptance clusters (module doc). At N the
    batch runs the run's own cycles.

    >>> batch_cycles(np.array([55.0]), np.array([[0, 133.0, 52.0]]), np.array([[0, 1.2, 2.4]]))
    array([[134.5,  55. ]])
    """
    excess = run_cycles - slowest[:, -1]
    at_n = spread[:, [-1]]
    scale = np.divide(spread[:, 1:], at_n, out=np.ones_like(spread[:, 1:]), where=at_n > 0)
    cycles: Array = slowest[:, 1:] + excess[:, None] * scale
    return cycles


def _normal_cdf(z: Array) -> Array:
    """The standard normal's CDF, to 1.5e-7 (Abramowitz and Stegun 7.1.26 for erf):
    ``0.5 (1 + sign(z) erf(|z| / sqrt 2))``, ``erf(u) = 1 - t (a1 + t (a2 + ...)) exp(-u**2)``
    with ``t = 1 / (1 + p u)``, worked in place a chunk at a time."""
    flat = np.ascontiguousarray(z, dtype=np.float64).reshape(-1)
    result = np.empty_like(flat)
    u, t, poly = (np.empty(min(CDF_CHUNK, len(flat))) for _ in range(3))
    for start in range(0, len(flat), CDF_CHUNK):
        part = flat[start : start + CDF_CHUNK]
        n = len(part)
        un, tn, pn, out = u[:n], t[:n], poly[:n], result[start : start + n]
        np.abs(part, out=un)
        np.divide(un, SQRT2, out=un)
        np.multiply(un, 0.3275911, out=tn)
        np.add(tn, 1.0, out=tn)
        np.divide(1.0, tn, out=tn)
        np.multiply(tn, 1.061405429, out=pn)
        for a in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
            np.add(pn, a, out=pn)
            np.multiply(pn, tn, out=pn)
        np.square(un, out=un)
        np.negative(un, out=un)
        np.exp(un, out=un)
        np.multiply(pn, un, out=pn)
        np.subtract(1.0, pn, out=pn)  # erf(|z| / sqrt 2)
        np.sign(part, out=out)
        np.multiply(out, pn, out=out)
        np.add(out, 1.0, out=out)
        np.multiply(out, 0.5, out=out)
    shaped: Array = result.reshape(np.shape(z))
    return shaped


def _figures(
    a: _Arrays,
    cycles: Array,
    batch: Array,
    measured: Sequence[tuple[int, Array]],
    toward_flat: float = 0.0,
    verify_scales: Sequence[float | None] = (),
) -> list[dict[str, float]]:
    """Steps 1..N's figures from one (drawn) observation; `cycles` from expected_cycles;
    `batch` [R, N] from batch_cycles; `measured`: other step counts' drawn costs
    [repeats, len(COSTS)], to refit on; `verify_scales`: per step count, verify over the run's
    own, or None (verify_scales())."""
    ks = range(1, a.steps + 1)
    means = dict(zip(COSTS, a.costs.mean(axis=0).tolist(), strict=True))
    if measured:
        seen = [(a.steps, means)] + [
            (k, dict(zip(COSTS, rows.mean(axis=0).tolist(), strict=True))) for k, rows in measured
        ]
        phases = _refit_costs(seen, ks)
    else:
        plain_step = len(a.plain_step) and a.plain_step.mean()
        phases = [
            _cycle_costs(means, a.steps, plain_step, k, toward_flat, scale)
            for k, scale in zip(ks, verify_scales or (None,) * len(ks), strict=True)
        ]
    cycle = np.array([phase[CYCLE] for phase in phases])  # [K]
    spent_s = a.elapsed_s[:, None] + (batch * cycle - (a.run_cycles * means[CYCLE])[:, None]) / 1e3
    tok_s = np.median(a.tokens[:, None] / spent_s, axis=0)
    accept = a.tokens.sum() / cycles[:, 1:].sum(axis=0)
    plain = float(np.median(a.plain)) if len(a.plain) else math.nan
    return [
        {
            "output_tok_s": float(tok_s[i]),
            "speedup": float(tok_s[i]) / plain if plain > 0 else math.nan,
            "accept_length": float(accept[i]),
            "cycle_ms": phase[CYCLE],
            "draft_ms": phase[DRAFT],
            "verify_ms": phase[VERIFY],
            "draft_extend_ms": phase[DRAFT_EXTEND],
            "accept_ms": phase[ACCEPT],
            "verify_share": phase[VERIFY] / phase[CYCLE],
        }
        for i, phase in enumerate(phases)
    ]


def _cycle_costs(
    means: Mapping[str, float],
    steps: int,
    plain_step: float,
    k: int,
    toward_flat: float = 0.0,
    verify_scale: float | None = None,
) -> dict[str, float]:
    """Each phase's mean ms per cycle at k steps, and the cycle's (the module doc), from the
    run's phase means at `steps` and the plain twin's decode step (0: not timed).

    `toward_flat` (0 to 1) moves verify and draft extend from their lines toward the run's
    own cost (flat in the width): 0 is the prediction, a draw between 0 and 1 the range a
    width's cost may take between the two (the module doc's intervals). Where the run timed
    its verify forward at two widths or more, verify is the run's own times `verify_scale`
    (verify_scales()): measured, not drawn."""
    other = means[CYCLE] - sum(means[p] for p in NAMED_PHASES)
    width, run_width = k + 1, steps + 1
    per_forward = means[DRAFT] / (steps - 1)
    target_run = means[VERIFY] + means[ACCEPT]
    one_token = plain_step or target_run
    if verify_scale is not None:
        verify = means[VERIFY] * verify_scale
    else:
        verify = _toward(
            _line(1, one_token, run_width, target_run, width) - means[ACCEPT],
            means[VERIFY],
            toward_flat,
        )
    phase = {
        DRAFT: per_forward * (k - 1),
        VERIFY: verify,
        DRAFT_EXTEND: _toward(
            _line(1, per_forward, run_width, means[DRAFT_EXTEND], width),
            means[DRAFT_EXTEND],
            toward_flat,
        ),
        ACCEPT: means[ACCEPT],
    }
    phase[CYCLE] = sum(phase[p] for p in NAMED_PHASES) + other
    return phase


def verify_scales(timed: Sequence[tuple[int, float]], steps: int) -> tuple[float | None, ...]:
    """Per step count 1..steps, the verify forward's cost at its width (k + 1 tokens a
    sequence) over its cost at the run's own (steps + 1), on the least-squares line through
    the widths `timed` (never below zero); all None with fewer than two widths timed."""
    untimed: tuple[float | None, ...] = (None,) * steps
    if len(timed) < 2:
        return untimed
    x = np.array([w for w, _ in timed], dtype=np.float64)
    y = np.array([ms for _, ms in timed], dtype=np.float64)
    line = _fit(x, y, np.arange(2, steps + 2, dtype=np.float64))
    own = float(line[-1])
    if own <= 0:
        return untimed
    return tuple(max(0.0, float(v)) / own for v in line)


def _toward(line: float, flat: float, fraction: float) -> float:
    return line + fraction * (flat - line)


def _refit_costs(seen: Sequence[tuple[int, Costs]], ks: Sequence[int]) -> list[dict[str, float]]:
    """Each phase's mean ms per cycle at each of `ks`, and the cycle's, on the least-squares
    lines in the steps through the step counts `seen` (the module doc's refit)."""
    steps = np.array([s for s, _ in seen], dtype=np.float64)
    parts = {p: [m[p] for _, m in seen] for p in NAMED_PHASES}
    parts["other"] = [m[CYCLE] - sum(m[p] for p in NAMED_PHASES) for _, m in seen]
    at = np.array(ks, dtype=np.float64)
    fitted = {p: np.maximum(0.0, _fit(steps, np.array(v), at)) for p, v in parts.items()}
    phases = []
    for i in range(len(at)):
        phase = {p: float(fitted[p][i]) for p in NAMED_PHASES}
        phase[CYCLE] = float(sum(values[i] for values in fitted.values()))
        phases.append(phase)
    return phases


def _fit(x: Array, y: Array, at: Array) -> Array:
    """The least-squares line through (x, y) at each of `at`; the mean where x holds one
    value."""
    if np.ptp(x) == 0:
        return np.full(len(at), float(y.mean()))
    slope, intercept = np.polyfit(x, y, 1)
    result: Array = slope * at + intercept
    return result


def _line(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """The straight line through (x0, y0) and (x1, y1), at x."""
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _estimate(value: float, draws: Sequence[float]) -> Estimate:
    finite = [d for d in draws if math.isfinite(d)]
    if not finite or not math.isfinite(value):
        return Estimate(value, math.nan, math.nan)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    # The prediction sits at one end of its width's range (the line), so a percentile
    # interval of draws between the line and flat can leave it out: stretched to hold it.
    return Estimate(value, min(float(low), value), max(float(high), value))


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf
