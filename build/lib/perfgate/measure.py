"""Measure a scenario: launch each server in turn, time the repeats, read the probe."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from perfgate import metrics
from perfgate.config import Scenario
from perfgate.engines.client import Completion, EngineClient
from perfgate.engines.commands import Mode, server_command
from perfgate.engines.launch import free_port, running_server
from perfgate.equivalence import compare_outputs
from perfgate.fingerprint import collect_fingerprint, detect_gpus
from perfgate.probe import probe_env
from perfgate.probe.reader import CycleRecord, read_records, wait_until_complete
from perfgate.results import Measurement, ModeResult, PhaseSummary

# Runs `one_repeat` `rounds` times; the suites pass pytest-benchmark's pedantic mode here.
TimedLoop = Callable[[Callable[[], None], int], None]


def plain_loop(one_repeat: Callable[[], None], rounds: int) -> None:
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
    scenario: Scenario, mode: Mode, workdir: Path, timed_loop: TimedLoop = plain_loop
) -> ModeResult:
    """Launch `scenario`'s server in `mode`, warm it up, time its repeats, and stop it."""
    probe_dir = workdir / f"probe-{mode}"
    command = server_command(
        scenario, mode, port=free_port(), extra_env=probe_env(probe_dir, scenario.engine)
    )
    log_path = workdir / f"server-{mode}.log"
    with (
        running_server(command, log_path, scenario.startup_timeout_s) as server,
        EngineClient(server.base_url, scenario.request_timeout_s) as client,
    ):
        info = client.server_info()
        for _ in range(scenario.warmup):
            client.generate(scenario.prompts, scenario.max_new_tokens)
        repeats: list[Repeat] = []
        timed_loop(lambda: repeats.append(_timed_repeat(client, scenario)), scenario.repeats)
        ttft_ms = [_ttft_ms(client, scenario.prompts) for _ in repeats]
        wait_until_complete(probe_dir, repeats[-1].finished_at)
    phases = summarize_phases(mode, read_records(probe_dir), repeats)
    samples = {**_repeat_samples(repeats, mode), "ttft_ms": tuple(ttft_ms), **phase_samples(phases)}
    return ModeResult(
        mode=mode,
        command=command.shell(),
        samples=samples,
        phases=phases,
        outputs=tuple(c.output_ids for c in repeats[0].completions),
        server_info=info,
        log_path=str(log_path),
    )


def _timed_repeat(client: EngineClient, scenario: Scenario) -> Repeat:
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


def measure_scenario(
    scenario: Scenario,
    profile: str,
    workdir: Path,
    timed_loops: dict[Mode, TimedLoop] | None = None,
) -> Measurement:
    """Measure the plain twin, then the speculative server (never both at once)."""
    started = datetime.now(UTC)
    loops = timed_loops or {}
    results = {
        mode: measure_mode(scenario, mode, workdir, loops.get(mode, plain_loop))
        for mode in ("plain", "spec")
    }
    return assemble_measurement(scenario, profile, results["plain"], results["spec"], started)


def assemble_measurement(
    scenario: Scenario, profile: str, plain: ModeResult, spec: ModeResult, started: datetime
) -> Measurement:
    """Join the two servers' results with the equivalence check and the fingerprint."""
    return Measurement(
        scenario=scenario.name,
        profile=profile,
        engine=scenario.engine,
        fingerprint=collect_fingerprint(scenario, spec.server_info, detect_gpus()),
        plain=plain,
        spec=spec,
        equivalence=compare_outputs(spec.outputs, plain.outputs),
        started_at=started,
        finished_at=datetime.now(UTC),
        config={k: v for k, v in asdict(scenario).items() if k != "name"},
    )
