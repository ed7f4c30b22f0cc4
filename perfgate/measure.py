"""Measure a scenario: launch each server in turn, time the repeats, read the probe."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from perfgate import metrics
from perfgate.config import Scenario
from perfgate.devices import detect_gpus
from perfgate.engines.client import Completion, EngineClient, RequestRefused
from perfgate.engines.launch import Server, probed_command, running_server
from perfgate.engines.prometheus import (
    CATEGORY_OF_PHASE,
    counter_deltas,
    device_seconds_by_category,
    parse_metrics,
)
from perfgate.engines.server_commands import Mode, ServerCommand
from perfgate.equivalence import ForcedToken, TeacherScores, compare_outputs
from perfgate.fingerprint import collect_fingerprint
from perfgate.folders import new_folder
from perfgate.preflight import Preflight, preflight
from perfgate.probe.reader import (
    CycleRecord,
    phase_totals_by_pid,
    rank_cycle_ms,
    read_records,
    wait_until_complete,
)
from perfgate.progress import SILENT, Reporter
from perfgate.results import PROBE_OVER_ENGINE, Measurement, ModeResult, PhaseSummary
from perfgate.serving.measure import measure_serving
from perfgate.teacher import score_outputs

# The plain twin's top tokens asked for at every output position, for the equivalence rule.
TOP_LOGPROBS = 5

# Runs `one_repeat` `rounds` times; the suites pass pytest-benchmark's pedantic mode here.
TimedLoop = Callable[[Callable[[], None], int], None]

# Run with a live server's client and its outputs once its timed repeats are done, before it
# stops (measure_mode's `while_up`).
WhileUp = Callable[[EngineClient, tuple[tuple[int, ...], ...]], object]
# Given every probe record of a server once it has stopped (measure_mode's `on_records`).
OnRecords = Callable[[Sequence[CycleRecord]], object]


def run_rounds(one_repeat: Callable[[], None], rounds: int) -> None:
    """Run `one_repeat` `rounds` times in turn: the TimedLoop where nothing else times them."""
    for _ in range(rounds):
        one_repeat()


@dataclass(frozen=True)
class Repeat:
    """One timed pass over the prompts."""

    started_at: float  # wall clock, to match the probe's records
    finished_at: float
    elapsed_s: float
    completions: tuple[Completion, ...]


def measure_mode(
    scenario: Scenario,
    mode: Mode,
    workdir: Path,
    timed_loop: TimedLoop = run_rounds,
    checked: Preflight | None = None,
    *,
    probe: bool = True,
    progress: Reporter = SILENT,
    while_up: WhileUp | None = None,
    on_records: OnRecords | None = None,
) -> ModeResult:
    """Launch `scenario`'s server in `mode`, warm it up, time its repeats, and stop it.

    `checked` is the scenario's preflight (perfgate.preflight), run here if not given:
    it names the SGLang release (flags, probe targets) and the GPUs whose memory must be
    released before the next server starts. With `probe` False the server runs without the
    probe (its variable set empty, so an inherited one cannot turn it on either): the result
    then has no phases, which is what measuring the probe's own cost needs. `progress`
    shows the server's start, the warm-up and the repeats. `while_up`, if given, is called
    last, with the client and the server's outputs, before the server stops: after the
    timed repeats and once the probe holds their cycles, so its requests count in no figure
    (each figure covers only the cycles that began inside a repeat). `on_records`, if
    given, is called with every probe record of the server (its `while_up` requests' too)
    once it has stopped.
    """
    checked = checked or preflight(scenario)
    workdir.mkdir(parents=True, exist_ok=True)
    # This server's probe files, and no other's; none at all without the probe.
    probe_dir = new_folder(workdir, f"probe-{mode}") if probe else None
    command = probed_command(scenario, mode, probe_dir, checked.sglang)
    log_path = workdir / f"server-{mode}.log"
    with server_and_client(scenario, command, log_path, checked, progress) as (server, client):
        command = server.command  # on another port, had its first been taken meanwhile
        info = client.server_info()
        warm_up(client, scenario, mode, progress)
        metrics_before = _engine_counters(client, scenario)
        repeats = run_repeats(client, scenario, mode, timed_loop, progress)
        metrics_after = _engine_counters(client, scenario)
        ttft_ms = [_ttft_ms(client, scenario.prompts) for _ in repeats]
        serving = (
            measure_serving(server.base_url, scenario, mode, workdir, progress)
            if scenario.serving is not None
            else {}
        )
        outputs = tuple(c.output_ids for c in repeats[0].completions)
        top = reference_logprobs(client, scenario, outputs) if mode == "plain" else ()
        if probe_dir is not None:
            wait_until_complete(probe_dir, repeats[-1].finished_at)
        if while_up is not None:
            while_up(client, outputs)
            if probe_dir is not None and on_records is not None:
                wait_until_complete(probe_dir, time.time())
    records = read_records(probe_dir) if probe_dir is not None else []
    if on_records is not None:
        on_records(records)
    # The phases a run records are rank 0's; the other ranks' cycles show in the spread.
    phases = summarize_phases(mode, [r for r in records if r.rank == 0], repeats)
    samples = {
        **_repeat_samples(repeats, mode),
        "ttft_ms": tuple(ttft_ms),
        **phase_samples(phases),
        **serving,
    }
    return ModeResult(
        mode=mode,
        command=command.shell(),
        samples=samples,
        phases=phases,
        outputs=outputs,
        server_info=info,
        log_path=str(log_path),
        top_logprobs=top,
        engine_metrics={
            **engine_metrics_summary(metrics_before, metrics_after, records, repeats),
            **rank_cycle_ms(records, repeats[0].started_at, repeats[-1].finished_at),
        },
    )


@contextmanager
def server_and_client(
    scenario: Scenario,
    command: ServerCommand,
    log_path: Path,
    checked: Preflight,
    progress: Reporter = SILENT,
) -> Iterator[tuple[Server, EngineClient]]:
    """Start `command`'s server, wait for it, and hand over a client; stop both on every exit.

    The server logs to `log_path`; on the way out it is stopped and `checked.gpus` waited
    for, so the next server starts on released GPUs.
    """
    with (
        running_server(
            command,
            log_path,
            scenario.startup_timeout_s,
            gpus=checked.gpus,
            release_timeout_s=scenario.gpu_release_timeout_s,
            progress=progress,
        ) as server,
        EngineClient(server.base_url, scenario.request_timeout_s) as client,
    ):
        yield server, client


def warm_up(client: EngineClient, scenario: Scenario, mode: Mode, progress: Reporter) -> None:
    """Generate the prompts `scenario.warmup` times, untimed, counting them on `progress`."""
    if not scenario.warmup:
        return
    with progress.step(f"{scenario.name} {mode}", total=scenario.warmup, unit="warmup") as step:
        for _ in range(scenario.warmup):
            step.advance()
            client.generate(scenario.prompts, scenario.max_new_tokens)


def run_repeats(
    client: EngineClient, scenario: Scenario, mode: Mode, timed_loop: TimedLoop, progress: Reporter
) -> list[Repeat]:
    """Time `scenario.repeats` repeats through `timed_loop`, counting them on `progress`."""
    repeats: list[Repeat] = []
    with progress.step(f"{scenario.name} {mode}", total=scenario.repeats, unit="repeat") as step:

        def one_repeat() -> None:
            step.advance()  # before the repeat's own clock starts (timed_repeat)
            repeats.append(timed_repeat(client, scenario))

        timed_loop(one_repeat, scenario.repeats)
    return repeats


def reference_logprobs(
    client: EngineClient, scenario: Scenario, outputs: Sequence[Sequence[int]]
) -> tuple[tuple[tuple[tuple[float, int], ...], ...], ...]:
    """The plain server's top tokens at each output position, outside the timed repeats.

    Positions are kept only as far as this pass generated the timed outputs' tokens (plus
    the first position where it did not: its context is still the same), so each list
    belongs to the context the equivalence rule compares. An engine that refuses logprobs
    gives none: a divergence then fails, its margin unknown.
    """
    try:
        completions = client.generate(
            scenario.prompts, scenario.max_new_tokens, top_logprobs_num=TOP_LOGPROBS
        )
    except RequestRefused:
        return ()
    aligned = []
    for completion, expected in zip(completions, outputs, strict=True):
        agree = 0
        for got, want in zip(completion.output_ids, expected, strict=False):
            if got != want:
                break
            agree += 1
        aligned.append(completion.top_logprobs[: agree + 1])
    return tuple(aligned)


def _engine_counters(client: EngineClient, scenario: Scenario) -> dict[str, float] | None:
    if not scenario.engine_metrics:
        return None
    text = client.metrics_text()
    return parse_metrics(text) if text is not None else None


def engine_metrics_summary(
    before: dict[str, float] | None,
    after: dict[str, float] | None,
    records: Sequence[CycleRecord],
    repeats: Sequence[Repeat],
) -> dict[str, float]:
    """The engine's counter deltas over the repeats and, per phase the engine's GPU timer
    also covers, `probe_over_engine.<phase>`: the probe's milliseconds over the engine's (the
    probe's median rank; the engine counts one rank). Empty without the engine's counters."""
    if before is None or after is None:
        return {}
    deltas = counter_deltas(before, after)
    seconds = device_seconds_by_category(deltas)
    totals = phase_totals_by_pid(records, repeats[0].started_at, repeats[-1].finished_at)
    summary = dict(deltas)
    for phase, category in CATEGORY_OF_PHASE.items():
        per_rank = [t[phase] for t in totals.values() if phase in t]
        if per_rank and seconds.get(category):
            summary[f"{PROBE_OVER_ENGINE}{phase}"] = statistics.median(per_rank) / (
                seconds[category] * 1e3
            )
    return summary


def timed_repeat(client: EngineClient, scenario: Scenario) -> Repeat:
    """Flush the cache, then generate the scenario's prompts once, timed."""
    client.flush_cache()
    started_wall, started = time.time(), time.perf_counter()
    completions = client.generate(scenario.prompts, scenario.max_new_tokens)
    elapsed = time.perf_counter() - started
    return Repeat(started_wall, time.time(), elapsed, tuple(completions))


def _ttft_ms(client: EngineClient, prompts: Sequence[str]) -> float:
    # Time to first token of the batch: a one-token request measures prefill and one step.
    started = time.perf_counter()
    client.generate(prompts, 1)
    return (time.perf_counter() - started) * 1e3


def _repeat_samples(repeats: Sequence[Repeat], mode: Mode) -> dict[str, tuple[float, ...]]:
    tok_s = tuple(sum(c.completion_tokens for c in r.completions) / r.elapsed_s for r in repeats)
    samples = {"output_tok_s": tok_s}
    if mode == "spec":
        samples["accept_length"] = tuple(_accept_length(r.completions) for r in repeats)
    return samples


def _accept_length(completions: Sequence[Completion]) -> float:
    # completion_tokens / spec_verify_ct: the bonus token included, on every SGLang version.
    verify = sum(c.spec_verify_ct or 0 for c in completions)
    return sum(c.completion_tokens for c in completions) / verify if verify else float("nan")


def summarize_phases(
    mode: str, records: Sequence[CycleRecord], repeats: Sequence[Repeat]
) -> tuple[PhaseSummary, ...]:
    """Summarise each phase over the cycles that started inside each repeat."""
    summaries = []
    for index, repeat in enumerate(repeats):
        window = [r for r in records if repeat.started_at <= r.started_at <= repeat.finished_at]
        cycles = [r.ms for r in window if r.kind == "cycle"]
        prefills = [r.ms[metrics.PREFILL] for r in window if r.kind == "prefill"]
        phases = [p for p in metrics.PROBED_PHASES if any(p in c for c in cycles)]
        for phase in phases:
            # A phase that did not run in a cycle (no draft-extend, say) took 0 ms in it.
            summaries.append(_summary(mode, phase, index, [c.get(phase, 0.0) for c in cycles]))
        if prefills:
            summaries.append(_summary(mode, metrics.PREFILL, index, prefills))
    return tuple(summaries)


def _summary(mode: str, phase: str, repeat: int, values_ms: Sequence[float]) -> PhaseSummary:
    ordered = sorted(values_ms)
    return PhaseSummary(
        mode=mode,
        phase=phase,
        repeat=repeat,
        cycles=len(ordered),
        median_ms=statistics.median(ordered),
        mean_ms=statistics.fmean(ordered),
        p90_ms=ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
    )


def phase_samples(phases: Sequence[PhaseSummary]) -> dict[str, tuple[float, ...]]:
    """Per-cycle phase metrics (`verify_ms`, ...): the median of each repeat."""
    samples: dict[str, list[float]] = {}
    for summary in sorted(phases, key=lambda s: s.repeat):
        metric = metrics.PHASE_METRIC.get(summary.phase)
        if metric:
            samples.setdefault(metric, []).append(summary.median_ms)
    return {metric: tuple(values) for metric, values in samples.items()}


def to_score(
    scenario: Scenario,
    spec_outputs: Sequence[Sequence[int]],
    plain_outputs: Sequence[Sequence[int]],
) -> list[int]:
    """The prompts whose speculative output the plain server scores: those that differ from
    the plain output, where the scenario gates its equivalence (none where it only reports)."""
    if scenario.equivalence != "gate":
        return []
    pairs = zip(spec_outputs, plain_outputs, strict=True)
    return [i for i, (s, p) in enumerate(pairs) if tuple(s) != tuple(p)]


def score_differing(
    client: EngineClient,
    scenario: Scenario,
    spec_outputs: Sequence[Sequence[int]],
    plain_outputs: Sequence[Sequence[int]],
) -> TeacherScores | None:
    """Score the speculative outputs that differ from the plain ones on the plain server
    behind `client`, by teacher forcing (perfgate.teacher); the other prompts get None.

    Nothing to score (see `to_score`) sends no request and gives None. An engine that
    refuses input logprobs gives None: the rule then judges each prompt at its first
    divergence.
    """
    differ = to_score(scenario, spec_outputs, plain_outputs)
    if not differ:
        return None
    prompts = [scenario.prompts[i] for i in differ]
    try:
        scored = score_outputs(client, prompts, [spec_outputs[i] for i in differ])
    except RequestRefused:
        return None
    by_prompt = dict(zip(differ, scored, strict=True))
    return tuple(by_prompt.get(i) for i in range(len(spec_outputs)))


def teacher_force(
    scenario: Scenario,
    plain: ModeResult,
    spec: ModeResult,
    workdir: Path,
    checked: Preflight | None = None,
    progress: Reporter = SILENT,
) -> TeacherScores | None:
    """Score the speculative outputs that differ from the plain ones on a plain server
    launched for it: where the plain twin is no longer up (its figures reused from the
    history, or measured before the speculative server).

    Nothing to score (identical outputs, or a scenario whose equivalence is only reported)
    launches nothing and gives None. Otherwise the plain server is launched once more,
    untimed and without the probe, and scores them (`score_differing`).
    """
    if not to_score(scenario, spec.outputs, plain.outputs):
        return None
    checked = checked or preflight(scenario)
    command = probed_command(scenario, "plain", None, checked.sglang)  # the probe off
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "server-teacher.log"
    with server_and_client(scenario, command, log, checked, progress) as (_, client):
        return score_differing(client, scenario, spec.outputs, plain.outputs)


def assemble_measurement(
    scenario: Scenario,
    profile: str,
    plain: ModeResult,
    spec: ModeResult,
    started: datetime,
    teacher: Sequence[Sequence[ForcedToken] | None] | None = None,
) -> Measurement:
    """Join the two servers' results with the equivalence check and the fingerprint.

    `teacher`: the plain server's scores of the speculative outputs (`score_differing`).
    """
    return Measurement(
        scenario=scenario.name,
        profile=profile,
        engine=scenario.engine,
        fingerprint=collect_fingerprint(scenario, spec.server_info, detect_gpus()),
        plain=plain,
        spec=spec,
        equivalence=compare_outputs(
            spec.outputs,
            plain.outputs,
            plain.top_logprobs,
            teacher=teacher,
            near_tie_margin=scenario.near_tie_margin,
            max_near_tie_share=scenario.max_near_tie_share,
        ),
        started_at=started,
        finished_at=datetime.now(UTC),
        config={k: v for k, v in asdict(scenario).items() if k != "name"},
    )
