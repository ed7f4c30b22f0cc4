"""What a run is judged against: the reviewed baseline, or this machine's own earlier runs.

A reviewed baseline (`baselines/<profile>/<scenario>.json`) judges a run whose environment
fingerprint matches its own. Where there is none for this machine's runner profile, or its
fingerprint differs, a local run is judged against the newest earlier runs of the same scenario
with the same fingerprint in the history (as asv compares with earlier results of one machine);
the first such run becomes the reference for the next. CI (`CI=true`, or `--require-baseline`)
accepts only a matching reviewed baseline. `choose_reference` is pure: the history's runs
come in as a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfgate import metrics
from perfgate.baselines import DEFAULT_KEEP, Baseline, BaselineRun, load_baseline
from perfgate.config import Scenario
from perfgate.errors import ConfigError, ExitCode
from perfgate.fingerprint import diff_fingerprints, injected
from perfgate.gate import DEFAULT_TOLERANCE, Status, Verdict, incomparable
from perfgate.results import Measurement, RunRecord
from perfgate.spec.environment import machine

# Statuses of earlier runs that may stand as a local reference: a regression or an error
# never does (the next run would be judged against the slow state it flagged).
REFERENCE_STATUSES = (Status.PASS, Status.IMPROVEMENT, Status.INCONCLUSIVE)
CI_VALUES = ("true", "1", "yes")
# Approved runs of one machine enough to judge its runs by them alone: their spread between
# launches is then that machine's own, and no other machine's speed offsets the verdict (on
# H100s of one kind one machine ran every GPU phase 1.1% faster, more than verify's 1%).
MACHINE_RUNS = 3
# What a run's reference words say where its machine's own approved runs judged it alone
# (machine_reference); records read it back (benchmarks/gate_proof.py).
OWN_MACHINE = "of this run's machine"


@dataclass(frozen=True)
class Reference:
    """What one scenario's run was judged against, and the words that say so.

    ``baseline`` is None when there is nothing to judge against (the first run here); then
    ``verdicts`` holds what was decided without judging (``incomparable`` in CI), if anything.
    """

    description: str
    baseline: Baseline | None = None
    verdicts: tuple[Verdict, ...] = ()
    # Judged against this machine's own runs: a few local runs cannot bound the machine's
    # noise, so an inconclusive verdict says so and does not fail the run.
    local: bool = False

    def run_budget(self, max_runs: int) -> int:
        """How many runs a verdict may take: one against local runs (another would fail
        nothing, and this one joins the reference), the scenario's `max_runs` otherwise."""
        return 1 if self.local else max_runs

    def blocks(self, verdict: Verdict) -> bool:
        """Whether this verdict fails the run, judged against this reference."""
        return self.exit_code(verdict.status) is not ExitCode.PASS

    def exit_code(self, status: Status) -> ExitCode:
        """The exit code of a run of this status; locally, inconclusive is no failure."""
        if self.local and status is Status.INCONCLUSIVE:
            return ExitCode.PASS
        return status_exit_code(status)


def requires_baseline(flag: bool, environ: Mapping[str, str]) -> bool:
    """Whether only a matching reviewed baseline may judge: `--require-baseline`, or CI."""
    return flag or environ.get("CI", "").strip().lower() in CI_VALUES


def fix_commands(scenario: str, profile: str) -> str:
    """The commands that give a runner profile its first reviewed baseline."""
    return (
        f"record on this runner with `perfgate run --no-gate --scenario {scenario}` "
        "(a few times), then approve those runs through the baseline-update workflow or "
        "`perfgate baseline update --run ID [--run ID ...] --approved-by NAME --reason TEXT` "
        f"(it writes baselines/{profile}/{scenario}.json; commit that file)"
    )


def missing_baseline(path: Path, scenario: str, profile: str) -> ConfigError:
    """The error for a run that requires a reviewed baseline where there is none."""
    return ConfigError(
        f"no reviewed baseline for scenario {scenario!r} on runner profile {profile!r}, "
        "and CI (or --require-baseline) requires one",
        file=path,
        fix=fix_commands(scenario, profile),
    )


def load_reviewed(path: Path, profile: str, scenario: str, *, required: bool) -> Baseline | None:
    """The reviewed baseline at `path`, validated; None where there is none and none is
    required, bad input (with the commands that make one) where one is."""
    if path.exists():
        return load_baseline(path, profile=profile, scenario=scenario)
    if required:
        raise missing_baseline(path, scenario, profile)
    return None


def scenario_gating(scenario: Scenario | None) -> tuple[dict[str, float], tuple[str, ...]]:
    """Tolerances and gated metrics from a scenario's config (the defaults without one)."""
    gated = scenario.gated if scenario else metrics.DEFAULT_GATED
    tolerances = dict(scenario.tolerances) if scenario else {}
    return {m: tolerances.get(m, DEFAULT_TOLERANCE) for m in gated}, tuple(gated)


def choose_reference(
    measurement: Measurement,
    reviewed: Baseline | None,
    earlier_runs: Callable[[], Sequence[RunRecord]],
    scenario: Scenario | None,
    *,
    require_baseline: bool,
) -> Reference:
    """The reference for ``measurement``: the reviewed baseline if it matches, else (outside
    CI) this machine's earlier runs of the same fingerprint, which ``earlier_runs`` returns."""
    if reviewed is not None:
        differences = diff_fingerprints(reviewed.fingerprint, measurement.fingerprint)
        if not differences:
            judged_by, note = machine_reference(reviewed, measurement.fingerprint)
            return Reference(_reviewed_words(reviewed) + note, judged_by)
        shown = _shown(reviewed.path)
        fields = ", ".join(
            f"{name} ({old or 'unset'} -> {new or 'unset'})" for name, old, new in differences
        )
        if require_baseline:
            return _mismatch(reviewed, shown, fields, differences, measurement)
        why = f"the reviewed baseline {shown} was measured elsewhere: {fields}"
    else:
        why = f"no reviewed baseline for runner profile {measurement.profile}"
    records = list(earlier_runs())
    slowed = injected(measurement.fingerprint)
    if not records and slowed is not None:
        return Reference(
            f"first run of {measurement.scenario} on this machine ({why}), slowed on purpose "
            f"({slowed}): judged against nothing, and never the local reference; record runs "
            "without the slowdown first",
            local=True,
        )
    if not records:
        return Reference(
            f"first run of {measurement.scenario} on this machine ({why}): recorded as the "
            "local reference; the next run will be compared with it",
            local=True,
        )
    baseline = history_baseline(records, scenario)
    ids = ", ".join(f"#{r.id}" for r in records)
    count = f"{len(records)} earlier run{'s' if len(records) > 1 else ''}"
    return Reference(f"judged against {count} on this machine ({ids}); {why}", baseline, local=True)


def history_baseline(records: Sequence[RunRecord], scenario: Scenario | None) -> Baseline:
    """A baseline made of earlier recorded runs (one fingerprint), for judging locally."""
    tolerances, gated = scenario_gating(scenario)
    first = records[0].measurement
    runs = tuple(
        BaselineRun(
            run_id=record.id,
            approved_by="",
            approved_at=record.measurement.started_at.isoformat(timespec="seconds"),
            reason="an earlier run on this machine",
            commit=record.context.commit,
            samples=record.measurement.samples(),
            phase_ms=record.measurement.phase_ms(),
        )
        for record in records
    )
    return Baseline(
        profile=first.profile,
        scenario=first.scenario,
        fingerprint=dict(first.fingerprint),
        tolerances=tolerances,
        gated=gated,
        runs=runs,
        keep=max(len(runs), 1),
    )


def _reviewed_words(baseline: Baseline) -> str:
    count = len(baseline.runs)
    shown = _shown(baseline.path)
    return f"judged against the reviewed baseline {shown} ({count} approved run(s))"


def machine_reference(baseline: Baseline, fingerprint: Mapping[str, str]) -> tuple[Baseline, str]:
    """The approved runs a run is judged by, and words for the machine's part in it.

    Where the baseline holds at least MACHINE_RUNS approved runs of the run's own machine and
    runs of others too, those runs alone: a pool's machines share a baseline, not their speed.
    Otherwise all of them, with machine_note's words where the machine ran none.
    """
    here = machine(fingerprint)
    own = tuple(run for run in baseline.runs if here is not None and run.machine == here)
    if len(own) < MACHINE_RUNS or len(own) == len(baseline.runs):
        return baseline, machine_note(baseline, fingerprint)
    words = (
        f"; by the {len(own)} {OWN_MACHINE}, {here}, alone: other machines' speed is "
        "not in its reference"
    )
    return replace(baseline, runs=own), words


def machine_note(baseline: Baseline, fingerprint: Mapping[str, str]) -> str:
    """Words for a run on a machine that none of the baseline's approved runs ran on; "" for
    one they did, or where the run or the baseline names no machine.

    Machines of one kind share a baseline, but not their speed: the approved runs' spread says
    how a machine varies between launches, not how far another machine sits from it.
    """
    here = machine(fingerprint)
    known = baseline.machines()
    if here is None or not known or here in known:
        return ""
    return (
        f"; this run's machine, {here}, ran none of them (they ran on {', '.join(known)}): "
        "a machine's own speed is not in their spread; approve runs of this machine too"
    )


def _shown(path: Path | None) -> str:
    """A baseline's path as a user would type it: relative to the current folder if inside."""
    if path is None:
        return "(no file)"
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _mismatch(
    reviewed: Baseline,
    shown: str,
    fields: str,
    differences: Sequence[tuple[str, str | None, str | None]],
    measurement: Measurement,
) -> Reference:
    verdicts = tuple(incomparable(reviewed.gated, differences))
    words = (
        f"not judged: the reviewed baseline {shown} was measured elsewhere ({fields}), "
        "and CI (or --require-baseline) judges only against a matching reviewed baseline; "
        + fix_commands(measurement.scenario, measurement.profile)
    )
    return Reference(words, None, verdicts)


LOCAL_KEEP = DEFAULT_KEEP  # earlier runs a local reference holds, newest first


def status_exit_code(status: Status) -> ExitCode:
    """The process exit code for a run's overall status (see perfgate.errors): the gate
    decides statuses, the command line and the plugin turn them into codes."""
    return {
        Status.PASS: ExitCode.PASS,
        Status.IMPROVEMENT: ExitCode.PASS,
        Status.REGRESSION: ExitCode.REGRESSION,
        Status.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
        # Judging against a baseline of another environment, or none, is a setup mistake.
        Status.INCOMPARABLE: ExitCode.BAD_INPUT,
        Status.ERROR: ExitCode.BAD_INPUT,
    }[status]
