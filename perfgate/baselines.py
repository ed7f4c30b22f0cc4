"""Approved baselines: one reviewed JSON file per (runner profile, scenario) under `baselines/`.

Only `perfgate baseline update` writes them; a pull-request job only reads them.

Schema 2 (this perfgate writes it)::

    {"schema_version": 2, "profile": "h200x8", "scenario": "llama33-70b-eagle3-tp8",
     "keep": 5, "gated": [...], "tolerances": {"output_tok_s": 0.03, ...},
     "fingerprint": {...},
     "runs": [{"run_id": 12, "approved_by": "alice", "approved_at": "2026-11-30T10:00:00+00:00",
               "reason": "...", "commit": "abc123",
               "samples": {"output_tok_s": [one value per repeat], ...},
               "phase_ms": {"spec": {"verify": [mean ms per cycle, per repeat], ...},
                            "plain": {"cycle": [...]}},
               "machine": "gpus-3f2a9c0d1e4b"}]}

A run's ``machine`` (optional; perfgate.hardware.machine_id) names the machine it ran on:
the machines of one runner profile share its baseline, and a verdict on another says so.

Schema 1 files (no ``phase_ms``) are read as schema 2 with no phase means: the gate judges
them as before and says attribution is unavailable; `perfgate baseline update` or
`perfgate baseline migrate` rewrites them as schema 2.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.errors import ConfigError
from perfgate.files import write_text_atomically
from perfgate.spec.environment import machine, reference_fingerprint

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
DEFAULT_KEEP = 5
MODES = ("spec", "plain")
# What a baseline may hold. A reviewer sees a diff, not every number: the loader refuses what
# the gate cannot judge (the noise estimate pairs every two samples of a run, so it is
# quadratic in them) or what no measurement gives.
MAX_BYTES = 4 * 1024 * 1024
MAX_RUNS = 20
MAX_SAMPLES = 500  # per metric (or phase) per run: one per repeat
MAX_VALUE = 1e9  # tok/s, ms, tokens per cycle, ratios: no measurement comes near it

# Per server mode, per phase: the mean ms per cycle of each repeat.
PhaseMs = Mapping[str, Mapping[str, tuple[float, ...]]]


@dataclass(frozen=True)
class BaselineRun:
    """One approved run: its samples and who approved it, when and why."""

    run_id: int | None
    approved_by: str
    approved_at: str  # ISO 8601, UTC
    reason: str
    commit: str | None
    samples: Mapping[str, tuple[float, ...]]
    phase_ms: PhaseMs = field(default_factory=dict)
    machine: str | None = None  # the machine it ran on (perfgate.hardware.machine_id), if known


@dataclass(frozen=True)
class Baseline:
    """The approved history of one scenario on one runner profile."""

    profile: str
    scenario: str
    fingerprint: Mapping[str, str]
    tolerances: Mapping[str, float]
    gated: tuple[str, ...]
    runs: tuple[BaselineRun, ...] = ()  # oldest first, at most `keep`
    keep: int = DEFAULT_KEEP
    path: Path | None = field(default=None, compare=False)
    schema_version: int = field(default=SCHEMA_VERSION, compare=False)  # as read from disk

    def metric_runs(self) -> dict[str, list[tuple[float, ...]]]:
        """Per metric, the samples of each approved run."""
        result: dict[str, list[tuple[float, ...]]] = {}
        for run in self.runs:
            for metric, values in run.samples.items():
                result.setdefault(metric, []).append(values)
        return result

    def machines(self) -> tuple[str, ...]:
        """The machines the approved runs ran on, as far as they name one, in order."""
        return tuple(dict.fromkeys(run.machine for run in self.runs if run.machine))

    def phase_runs(self, mode: str = "spec") -> list[Mapping[str, tuple[float, ...]]]:
        """Per approved run that has them, the phase means of one server mode."""
        return [run.phase_ms[mode] for run in self.runs if run.phase_ms.get(mode)]


def baseline_path(baselines_dir: Path, profile: str, scenario: str) -> Path:
    return baselines_dir / profile / f"{scenario}.json"


def load_baseline(
    path: Path, *, profile: str | None = None, scenario: str | None = None
) -> Baseline:
    """Read and validate a baseline file; every problem names the file and the field.

    `profile` and `scenario`: those its path stands for (baselines/PROFILE/SCENARIO.json),
    which the file's own fields must name.
    """
    text = _read_bounded(path)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"is not valid JSON ({error.msg} at line {error.lineno})",
            file=path,
            fix="restore it from git or fix the syntax",
        ) from None
    except RecursionError:
        raise ConfigError(
            "is nested too deeply to be a baseline", file=path, fix="restore it from git"
        ) from None
    baseline = _parse(path, document)
    check = _Checker(path)
    for name, expected, found in (
        ("profile", profile, baseline.profile),
        ("scenario", scenario, baseline.scenario),
    ):
        check.that(
            expected is None or found == expected,
            name,
            f"is {found!r}, but the file is the baseline of {name} {expected!r} (its path)",
            "restore the file from git, or move it to the path of its own profile and scenario",
        )
    return baseline


def _read_bounded(path: Path) -> str:
    """The file's text, if it is a regular file of at most MAX_BYTES (nothing else is read)."""
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer (then it is refused).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(
            "no such baseline",
            file=path,
            fix="record a run with `perfgate run --no-gate`, then approve it with "
            "`perfgate baseline update --run ID --approved-by NAME --reason TEXT`",
        ) from None
    except OSError as error:
        raise ConfigError(
            f"cannot be read ({error.strerror})", file=path, fix="restore it from git"
        ) from None
    try:
        _check_file(path, os.fstat(fd))
    except ConfigError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"cannot be read ({error})", file=path, fix="restore it from git"
        ) from None


def _check_file(path: Path, info: os.stat_result) -> None:
    """Refuse what is not a regular file of at most MAX_BYTES (a folder, a FIFO, a huge file)."""
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            "is a folder, not a baseline file",
            file=path,
            fix="a baseline is a JSON file (baselines/PROFILE/SCENARIO.json): name one, or "
            "remove the folder where it stands in one's place",
        )
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            "is not a regular file", file=path, fix="restore the baseline file from git"
        )
    if info.st_size > MAX_BYTES:
        raise ConfigError(
            f"is {info.st_size} bytes; a baseline is at most {MAX_BYTES}",
            file=path,
            fix=f"restore it from git (a baseline keeps at most {MAX_RUNS} runs of "
            f"{MAX_SAMPLES} samples per metric)",
        )


def _parse(path: Path, doc: Any) -> Baseline:
    check = _Checker(path)
    check.that(isinstance(doc, dict), "", "must be a JSON object")
    version = doc.get("schema_version")
    check.that(
        isinstance(version, int) and not isinstance(version, bool),
        "schema_version",
        f"is {version!r}, not a schema version",
        "restore the file from git",
    )
    check.that(
        version in READABLE_VERSIONS,
        "schema_version",
        f"is {version}, this perfgate reads {', '.join(map(str, READABLE_VERSIONS))}",
        "upgrade perfgate to read files written by a newer one",
    )
    gated = tuple(check.str_list(doc, "gated"))
    check.that(
        bool(gated),
        "gated",
        "lists no metric: a verdict against this baseline would judge nothing",
        "restore the file from git, or write it again with `perfgate baseline update`",
    )
    for metric in gated:
        check.that(metric in metrics.METRICS, "gated", f"names unknown metric {metric!r}")
    tolerances = check.mapping(doc, "tolerances")
    for metric, value in tolerances.items():
        check.that(metric in metrics.METRICS, f"tolerances.{metric}", "is not a metric")
        check.that(
            _number(value) and 0 < value < 1,
            f"tolerances.{metric}",
            f"is {value!r}",
            "write a fraction between 0 and 1 (0.03 means 3%)",
        )
    fingerprint = check.mapping(doc, "fingerprint")
    for key, value in fingerprint.items():
        check.that(isinstance(value, str), f"fingerprint.{key}", "must be a string")
    raw_runs = doc.get("runs")
    check.that(isinstance(raw_runs, list), "runs", "must be a list of approved runs")
    check.that(
        len(raw_runs) <= MAX_RUNS,
        "keep",
        f"the file holds {len(raw_runs)} runs; a baseline keeps at most {MAX_RUNS}",
        "restore it from git",
    )
    runs = tuple(_parse_run(check, i, raw, version) for i, raw in enumerate(raw_runs))
    for metric in gated:
        check.that(
            any(run.samples.get(metric) for run in runs),
            f"runs[*].samples.{metric}",
            f"metric {metric!r} has no samples",
            "run `perfgate baseline update --run ID ...` with a run that measured it",
        )
    keep = doc.get("keep", DEFAULT_KEEP)
    check.that(
        isinstance(keep, int) and 1 <= keep <= MAX_RUNS and len(runs) <= max(keep, 1),
        "keep",
        f"is {keep!r} with {len(runs)} run(s)",
        f"write an integer from 1 to {MAX_RUNS}, and keep at most that many runs",
    )
    return Baseline(
        profile=check.text(doc, "profile"),
        scenario=check.text(doc, "scenario"),
        fingerprint=fingerprint,
        tolerances={k: float(v) for k, v in tolerances.items()},
        gated=gated,
        runs=runs,
        keep=keep,
        path=path,
        schema_version=version,
    )


def _parse_run(check: _Checker, index: int, raw: Any, version: int) -> BaselineRun:
    where = f"runs[{index}]"
    check.that(isinstance(raw, dict), where, "must be an object")
    samples = check.mapping(raw, "samples", where)
    parsed: dict[str, tuple[float, ...]] = {}
    for metric, values in samples.items():
        field_name = f"{where}.samples.{metric}"
        check.that(metric in metrics.METRICS, field_name, "is not a metric")
        check.values(values, field_name, positive=True)
        parsed[metric] = tuple(float(v) for v in values)
    run_id = raw.get("run_id")
    check.that(run_id is None or isinstance(run_id, int), f"{where}.run_id", "must be an integer")
    commit = raw.get("commit")
    check.that(commit is None or isinstance(commit, str), f"{where}.commit", "must be a string")
    ran_on = raw.get("machine")
    check.that(
        ran_on is None or (isinstance(ran_on, str) and ran_on != ""),
        f"{where}.machine",
        "must be a machine's name (a non-empty string) or absent",
    )
    return BaselineRun(
        run_id=run_id,
        approved_by=check.text(raw, "approved_by", where),
        approved_at=check.text(raw, "approved_at", where),
        reason=check.text(raw, "reason", where),
        commit=commit,
        samples=parsed,
        phase_ms=_parse_phase_ms(check, where, raw) if version >= 2 else {},
        machine=ran_on,
    )


def _parse_phase_ms(check: _Checker, where: str, raw: Mapping[str, Any]) -> PhaseMs:
    """``phase_ms``: per mode, per phase, a list of mean ms per cycle (one per repeat)."""
    modes = check.mapping(raw, "phase_ms", where)
    parsed: dict[str, dict[str, tuple[float, ...]]] = {}
    for mode, phases in modes.items():
        name = f"{where}.phase_ms.{mode}"
        check.that(mode in MODES, name, f"is not a server mode ({', '.join(MODES)})")
        check.that(isinstance(phases, dict), name, "must be a JSON object")
        for phase, values in phases.items():
            check.that(phase in metrics.PROBED_PHASES, f"{name}.{phase}", "is not a phase")
            check.values(values, f"{name}.{phase}", positive=False)
            parsed.setdefault(mode, {})[phase] = tuple(float(v) for v in values)
    return parsed


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Checker:
    """Raises a ConfigError naming the file and field when a condition fails."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def that(self, ok: bool, where: str, problem: str, fix: str | None = None) -> None:
        if not ok:
            raise ConfigError(
                problem,
                file=self.path,
                field=where or None,
                fix=fix or "fix the field, or restore the file from git",
            )

    def values(self, values: Any, where: str, *, positive: bool) -> None:
        """A list of at most MAX_SAMPLES finite numbers below MAX_VALUE (> 0, or >= 0)."""
        self.that(isinstance(values, list), where, "must be a list of numbers")
        self.that(
            len(values) <= MAX_SAMPLES,
            where,
            f"holds {len(values)} values; a run keeps at most {MAX_SAMPLES} (one per repeat)",
            "restore the file from git",
        )
        low = "> 0" if positive else ">= 0"
        for value in values:
            ok = _number(value) and math.isfinite(value) and value < MAX_VALUE
            self.that(
                ok and (value > 0 if positive else value >= 0),
                where,
                f"holds {value!r}; each value must be a finite number {low} and < {MAX_VALUE:g}",
                "restore the file from git: no measurement gives that value",
            )

    def text(self, doc: Mapping[str, Any], key: str, where: str = "") -> str:
        value = doc.get(key)
        name = f"{where}.{key}" if where else key
        self.that(isinstance(value, str) and bool(value), name, "must be a non-empty string")
        return str(value)

    def str_list(self, doc: Mapping[str, Any], key: str) -> list[str]:
        value = doc.get(key)
        self.that(
            isinstance(value, list) and all(isinstance(v, str) for v in value),
            key,
            "must be a list of metric names",
        )
        return list(value or ())

    def mapping(self, doc: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
        value = doc.get(key)
        name = f"{where}.{key}" if where else key
        self.that(isinstance(value, dict), name, "must be a JSON object")
        return dict(value or {})


def dump_baseline(baseline: Baseline) -> str:
    """The file's text: sorted keys and one sample list per line, so diffs stay readable."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "profile": baseline.profile,
        "scenario": baseline.scenario,
        "keep": baseline.keep,
        "gated": list(baseline.gated),
        "tolerances": dict(baseline.tolerances),
        "fingerprint": dict(baseline.fingerprint),
        "runs": [
            {
                "run_id": run.run_id,
                "approved_by": run.approved_by,
                "approved_at": run.approved_at,
                "reason": run.reason,
                "commit": run.commit,
                "samples": {k: [round(v, 6) for v in vs] for k, vs in run.samples.items()},
                "phase_ms": {
                    mode: {phase: [round(v, 6) for v in vs] for phase, vs in phases.items()}
                    for mode, phases in run.phase_ms.items()
                },
                **({"machine": run.machine} if run.machine else {}),
            }
            for run in baseline.runs
        ],
    }
    return _dumps(document) + "\n"


def _dumps(value: Any, depth: int = 0) -> str:
    """JSON with sorted keys, objects indented, and lists of numbers kept on one line."""
    pad = "  " * (depth + 1)
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(k)}: {_dumps(value[k], depth + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        items = [pad + _dumps(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * depth + "]"
    return json.dumps(value)


def write_baseline(baseline: Baseline, path: Path) -> None:
    """Write atomically: a reader sees the old file or the new one, never half of one.

    What the loader would refuse (a sample of 0, too many repeats) is refused here first.
    """
    text = dump_baseline(baseline)
    _parse(path, json.loads(text))
    write_text_atomically(path, text)


def approve_run(
    baseline: Baseline | None,
    *,
    profile: str,
    scenario: str,
    fingerprint: Mapping[str, str],
    samples: Mapping[str, Sequence[float]],
    phase_ms: PhaseMs,
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    run_id: int | None,
    commit: str | None,
    approved_by: str,
    reason: str,
    now: datetime | None = None,
) -> Baseline:
    """Return the baseline with the run appended (keeping the last `keep`).

    A run whose fingerprint differs from the baseline's starts a new history: the older runs
    were measured in another environment and cannot be compared with it. The environment is
    the run's fingerprint less its soft fields (perfgate.spec.environment): runs of several
    machines of one kind share a baseline, and each approved run names its machine.
    """
    environment = reference_fingerprint(fingerprint)
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    run = BaselineRun(
        run_id=run_id,
        approved_by=approved_by,
        approved_at=stamp,
        reason=reason,
        commit=commit,
        samples={k: tuple(v) for k, v in samples.items() if k in metrics.METRICS},
        phase_ms={
            mode: {p: tuple(v) for p, v in phases.items()} for mode, phases in phase_ms.items()
        },
        machine=machine(fingerprint),
    )
    previous = baseline.runs if baseline and baseline.fingerprint == environment else ()
    keep = baseline.keep if baseline else DEFAULT_KEEP
    fresh = Baseline(
        profile=profile,
        scenario=scenario,
        fingerprint=environment,
        tolerances=dict(tolerances),
        gated=tuple(gated),
        keep=keep,
    )
    return replace(fresh, runs=(*previous, run)[-keep:])
