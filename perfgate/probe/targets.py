"""Which methods form each phase, per engine, server mode and release: data, not code.

The probe wraps each listed method; the time spent inside it is charged to its phase. The
method listed for `cycle` must run once per decode cycle and enclose the other phases. A
phase method called inside another phase method is subtracted from the outer one (each
phase gets its *own* time), so `other = cycle - sum(named phases)` stays honest.

SGLang (checked against each release's source by tests/engines/test_sglang_source.py):

- Spec v2, `EAGLEWorkerV2` with its `EagleDraftWorker` (every supported release; the only
  worker from 0.5.13). One call of `EAGLEWorkerV2.forward_batch_generation` on a decode batch
  is one verify round: `draft_worker.draft` (multi-step draft and tree), then `self.verify`,
  which prepares the verify input on the plan stream, runs the target forward
  (`TpModelWorker.forward_batch_generation(..., is_verify=True)`), then samples, accepts and
  commits the accepted tokens; then `draft_worker._draft_extend_for_decode`. So `draft`,
  `verify` (the target forward alone), `accept` (the rest of `EAGLEWorkerV2.verify`) and
  `draft_extend` are disjoint and in order. Under the overlap scheduler the scheduler thread
  calls it inside its forward stream and returns as soon as the work is queued, so the CPU
  clock would measure launch time only; the probe's CUDA events are recorded on that stream.
  `cycle` is therefore the GPU time of the forward stream from the start of this round's draft
  to the end of its draft extend, waits on the plan stream and launch gaps included; the
  scheduler's CPU work for the next batch runs meanwhile and is not part of it.
- Spec v1, `EAGLEWorker` (below 0.5.13, when the overlap scheduler is off: topk > 1,
  `--disable-overlap-schedule`, or spec v2 switched off): the same shape, with
  `forward_draft_extend_after_decode` as the draft extend.
- A prefill batch goes through the same `forward_batch_generation`; `decode_if` tells the two
  apart (`batch.forward_mode.is_decode()`), and such a call is timed as `prefill`.
- The plain twin: `TpModelWorker.forward_batch_generation` is one decode step (forward and
  sampling), or a prefill.
- Batches of DP-attention idle ranks (`forward_mode` IDLE) count as prefill: perfgate
  measures tensor parallelism, not DP attention.

Accepted drafts: the `accept` target of each speculative table also says where its method's
result tells how many draft tokens each sequence of the batch accepted this cycle, and which
sequence is which (`AcceptedDrafts`); the probe writes both into the cycle's record, which is
what `perfgate plan` predicts other step counts from. Spec v2's `EAGLEWorkerV2.verify` returns
a `GenerationBatchResult` whose `accept_lens` (a device tensor, bonus token included: its
`sample` adds one) the probe copies to the host without waiting; spec v1's returns a tuple
whose second item is the `EagleVerifyOutput`, holding a host list without the bonus
(`accept_length_per_req_cpu` in 0.5.6 and 0.5.10.post1, `num_correct_drafts_per_req_cpu` in
0.5.12.post1). Both name each sequence by its request-pool slot, `req_pool_indices` of the
batch they take (its host copy `req_pool_indices_cpu` where the release keeps one). Checked
against each release's source by tests/engines/test_sglang_source.py, not run: no SGLang
server runs in perfgate's own tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfgate import metrics
from perfgate.metrics import ACCEPT, CYCLE, DRAFT, DRAFT_EXTEND, VERIFY
from perfgate.sglang.facts import SPEC_V1_RELEASES, SUPPORTED
from perfgate.sglang.versions import VersionRange

Mode = str  # "spec" or "plain" (perfgate.engines.server_commands.Mode)
BOTH_MODES: tuple[Mode, ...] = ("plain", "spec")


@dataclass(frozen=True)
class AcceptedDrafts:
    """Where a phase method tells how many draft tokens each sequence accepted, and which
    sequence is which.

    Each is one or more dotted paths, the first that leads to a value (not None) taken: from
    ``result`` (what the method returned) or ``arg`` (its first argument after ``self``),
    through attributes, and through tuples by position (``result.1.accept_length_per_req_cpu``);
    several where releases renamed the value. The counts are per sequence of the batch; `bonus`
    is 1 where they include the bonus token (the target's own token after the last accepted
    draft), 0 where they count drafts only. `rows` names each sequence with a value that stays
    the same while it decodes (a batch row, a request-pool slot), so a sequence's cycles can
    be told from its neighbours'.
    """

    counts: tuple[str, ...]
    rows: tuple[str, ...]
    bonus: int = 0


@dataclass(frozen=True)
class ProbeTarget:
    module: str
    qualname: str  # class name inside the module
    method: str
    phase: str
    # For a `cycle` target: a dotted path from the method's first argument to a predicate
    # (`forward_mode.is_decode`); where it is false, the call is timed as `prefill`.
    decode_if: str | None = None
    versions: VersionRange | None = None  # None: every release of the engine
    modes: tuple[Mode, ...] = BOTH_MODES
    # Where the method's result says what each sequence accepted (an `accept` target's).
    accepted: AcceptedDrafts | None = None


_EMBEDDED_WORKER = "perfgate.engines.embedded.worker"

EMBEDDED_TARGETS: tuple[ProbeTarget, ...] = (
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "prefill", metrics.PREFILL),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "cycle", metrics.CYCLE),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "draft", metrics.DRAFT),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "verify", metrics.VERIFY),
    ProbeTarget(
        _EMBEDDED_WORKER,
        "EagleWorker",
        "accept",
        metrics.ACCEPT,
        accepted=AcceptedDrafts(("result.drafts",), ("result.rows",)),
    ),
    ProbeTarget(_EMBEDDED_WORKER, "EagleWorker", "draft_extend", metrics.DRAFT_EXTEND),
    ProbeTarget(_EMBEDDED_WORKER, "PlainWorker", "prefill", metrics.PREFILL),
    ProbeTarget(_EMBEDDED_WORKER, "PlainWorker", "decode_step", metrics.CYCLE),
)

_TP_WORKER = "sglang.srt.managers.tp_worker"
_V1 = "sglang.srt.speculative.eagle_worker"
_V2 = "sglang.srt.speculative.eagle_worker_v2"
_DECODE = "forward_mode.is_decode"
_OLD = SPEC_V1_RELEASES  # the releases with spec v1
_ALL = SUPPORTED


# What each release's accept method says about the sequences of its batch (module doc).
_SLOTS = ("arg.req_pool_indices_cpu", "arg.req_pool_indices")
_V2_ACCEPTED = AcceptedDrafts(("result.accept_lens",), _SLOTS, bonus=1)
_V1_ACCEPTED = AcceptedDrafts(
    ("result.1.num_correct_drafts_per_req_cpu", "result.1.accept_length_per_req_cpu"), _SLOTS
)


def _sglang(
    module: str,
    owner: str,
    method: str,
    phase: str,
    versions: VersionRange,
    mode: Mode,
    accepted: AcceptedDrafts | None = None,
) -> ProbeTarget:
    decode_if = _DECODE if phase == metrics.CYCLE else None
    return ProbeTarget(module, owner, method, phase, decode_if, versions, (mode,), accepted)


SGLANG_TARGETS: tuple[ProbeTarget, ...] = (
    # Spec v2: every supported release.
    _sglang(_V2, "EAGLEWorkerV2", "forward_batch_generation", CYCLE, _ALL, "spec"),
    _sglang(_V2, "EagleDraftWorker", "draft", DRAFT, _ALL, "spec"),
    _sglang(_V2, "EAGLEWorkerV2", "verify", ACCEPT, _ALL, "spec", _V2_ACCEPTED),
    _sglang(_V2, "EagleDraftWorker", "_draft_extend_for_decode", DRAFT_EXTEND, _ALL, "spec"),
    # Spec v1: the releases that still have it.
    _sglang(_V1, "EAGLEWorker", "forward_batch_generation", CYCLE, _OLD, "spec"),
    _sglang(_V1, "EAGLEWorker", "draft", DRAFT, _OLD, "spec"),
    _sglang(_V1, "EAGLEWorker", "verify", ACCEPT, _OLD, "spec", _V1_ACCEPTED),
    _sglang(_V1, "EAGLEWorker", "forward_draft_extend_after_decode", DRAFT_EXTEND, _OLD, "spec"),
    # The target model's forward: verify on the speculative server, a whole step on the twin.
    _sglang(_TP_WORKER, "TpModelWorker", "forward_batch_generation", VERIFY, _ALL, "spec"),
    _sglang(_TP_WORKER, "TpModelWorker", "forward_batch_generation", CYCLE, _ALL, "plain"),
)  # fmt: skip


@dataclass(frozen=True)
class TimedAlgorithms:
    """The speculative algorithms whose worker a target table times, in some releases.

    `untimed_flags`: a flag that makes the engine run another worker for them, which no
    table covers.
    """

    names: tuple[str, ...]
    versions: VersionRange | None = None  # None: every release of the engine
    untimed_flags: tuple[str, ...] = ()


# SGLang 0.5.23's SpeculativeAlgorithm.create_worker: EAGLE and EAGLE3 (NEXTN is EAGLE) run
# EAGLEWorkerV2, STANDALONE its subclass StandaloneWorkerV2, which keeps the timed methods;
# with --enable-multi-layer-eagle they run MultiLayerEagleWorkerV2, and NGRAM, DFLASH, UNO,
# DSPARK, FROZEN_KV_MTP run workers of their own: none of those has a table here.
TIMED_ALGORITHMS: dict[str, tuple[TimedAlgorithms, ...]] = {
    "embedded": (TimedAlgorithms(("EAGLE3", "EAGLE", "STANDALONE")),),
    "sglang": (
        TimedAlgorithms(
            ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"), _ALL, ("--enable-multi-layer-eagle",)
        ),
    ),
}
UNTIMED_PHASES = ", ".join((DRAFT, VERIFY, DRAFT_EXTEND, ACCEPT, CYCLE))


def untimed_reason(
    table: str, version: str | None, algorithm: str, flags: tuple[str, ...] = ()
) -> str | None:
    """Why the probe cannot time this algorithm's decode cycle; None when it can."""
    name = algorithm.upper()
    release = f" {version}" if version else ""
    for entry in TIMED_ALGORITHMS.get(table, ()):
        if name not in entry.names:
            continue
        if entry.versions is not None and version and not entry.versions.contains(version):
            continue
        used = [f for f in entry.untimed_flags if any(a.split("=")[0] == f for a in flags)]
        if used:
            return (
                f"{table}{release} runs {name} with {used[0]} in a worker perfgate has no "
                "phase table for"
            )
        return None
    return f"perfgate has no phase table for {name} on {table}{release} (perfgate/probe/targets.py)"


TARGET_TABLES: dict[str, tuple[ProbeTarget, ...]] = {
    "embedded": EMBEDDED_TARGETS,
    "sglang": SGLANG_TARGETS,
}


def select_targets(table: str, version: str | None, mode: Mode | None) -> tuple[ProbeTarget, ...]:
    """The targets of `table` for one release and server mode; a LookupError if none fit."""
    if table not in TARGET_TABLES:
        raise LookupError(
            f"no probe target table for {table!r}; perfgate knows {', '.join(TARGET_TABLES)}"
        )
    targets = TARGET_TABLES[table]
    if any(t.versions is not None for t in targets) and not version:
        raise LookupError(f"the {table!r} probe table needs the engine's version")
    if any(t.modes != BOTH_MODES for t in targets) and mode is None:
        raise LookupError(f"the {table!r} probe table needs the server's mode (spec or plain)")
    chosen = tuple(
        t
        for t in targets
        if (mode is None or mode in t.modes)
        and (t.versions is None or version is None or t.versions.contains(version))
    )
    if not chosen:
        raise LookupError(f"no probe targets in {table!r} for release {version}, mode {mode}")
    return chosen
