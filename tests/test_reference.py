"""What a run is judged against: the reviewed baseline, this machine's own runs, or nothing yet."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baselines import approve_run
from perfgate.config import Scenario
from perfgate.context import detect_context
from perfgate.gate import Status, Verdict
from perfgate.hardware import cpu_slug, default_profile
from perfgate.measured_verdicts import judge_measurements
from perfgate.reference import choose_reference, fix_commands, requires_baseline
from perfgate.results import RunContext, RunRecord

from .factories import FINGERPRINT
from .test_judging import noisy

SCENARIO = Scenario(name="tiny", engine="embedded", model="m", draft="d")


def _reviewed(fingerprint: dict[str, str]):  # type: ignore[no-untyped-def]
    m = noisy(0)
    baseline = approve_run(
        None,
        profile="cpu",
        scenario="tiny",
        fingerprint=fingerprint,
        samples=m.samples(),
        phase_ms=m.phase_ms(),
        tolerances={"output_tok_s": 0.03},
        gated=["output_tok_s"],
        run_id=1,
        commit="c0",
        approved_by="alice",
        reason="r",
    )
    return replace(baseline, path=Path("baselines/cpu/tiny.json"))


def _earlier(*seeds: int) -> list[RunRecord]:
    return [
        RunRecord(noisy(seed), RunContext(commit="c0"), (), Status.PASS, id=seed + 1)
        for seed in seeds
    ]


@pytest.mark.parametrize(
    ("model", "slug"),
    [
        ("AMD EPYC", "amd-epyc"),
        ("Intel(R) Xeon(R) Processor @ 2.80GHz", "intel-xeon"),
        ("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "intel-xeon-gold-6338"),
        ("AMD Ryzen 7 PRO 4750U with Radeon Graphics", "amd-ryzen-7-pro-4750u"),
        ("Apple M2 Pro", "apple-m2-pro"),
        ("", "unknown"),
    ],
)
def test_a_cpu_profile_names_the_cpu_model(model: str, slug: str) -> None:
    assert cpu_slug(model) == slug
    assert default_profile(None, cpu=model, cpu_count=8) == f"cpu-{slug}-8c"


def test_a_matching_reviewed_baseline_judges() -> None:
    reviewed = _reviewed(dict(noisy(1).fingerprint))
    chosen = choose_reference(noisy(1), reviewed, _must_not_ask, SCENARIO, require_baseline=True)
    assert chosen.baseline is reviewed
    assert chosen.description == (
        "judged against the reviewed baseline baselines/cpu/tiny.json (1 approved run(s))"
    )


def test_without_a_reviewed_baseline_the_first_run_becomes_the_reference() -> None:
    chosen = choose_reference(noisy(1), None, list, SCENARIO, require_baseline=False)
    assert chosen.baseline is None and chosen.verdicts == ()
    assert chosen.description == (
        "first run of tiny on this machine (no reviewed baseline for runner profile cpu): "
        "recorded as the local reference; the next run will be compared with it"
    )


def test_later_runs_are_judged_against_this_machines_runs() -> None:
    chosen = choose_reference(
        noisy(9), None, lambda: _earlier(0, 1, 2), SCENARIO, require_baseline=False
    )
    assert chosen.description == (
        "judged against 3 earlier runs on this machine (#1, #2, #3); "
        "no reviewed baseline for runner profile cpu"
    )
    assert chosen.baseline is not None
    assert [run.run_id for run in chosen.baseline.runs] == [1, 2, 3]
    assert chosen.baseline.runs[0].samples == noisy(0).samples()
    # The scenario's config decides what is gated and how tightly (defaults for the rest).
    assert chosen.baseline.gated == SCENARIO.gated
    assert chosen.baseline.tolerances["verify_ms"] == 0.03


def test_a_reviewed_baseline_from_elsewhere_falls_back_to_local_runs_outside_ci() -> None:
    reviewed = _reviewed({**FINGERPRINT, "cpu": "AMD EPYC"})
    current = replace(noisy(1), fingerprint={**FINGERPRINT, "cpu": "Intel(R) Xeon(R)"})
    chosen = choose_reference(current, reviewed, _earlier, SCENARIO, require_baseline=False)
    assert chosen.description.startswith("first run of tiny on this machine (the reviewed ")
    assert "measured elsewhere: cpu (AMD EPYC -> Intel(R) Xeon(R))" in chosen.description


def test_in_ci_a_reviewed_baseline_from_elsewhere_is_incomparable_with_the_fix() -> None:
    reviewed = _reviewed({**FINGERPRINT, "cpu": "AMD EPYC"})
    current = replace(noisy(1), fingerprint={**FINGERPRINT, "cpu": "Intel(R) Xeon(R)"})
    chosen = choose_reference(current, reviewed, _must_not_ask, SCENARIO, require_baseline=True)
    assert chosen.baseline is None
    assert [(v.metric, v.status) for v in chosen.verdicts] == [
        ("output_tok_s", Status.INCOMPARABLE)
    ]
    assert "cpu (AMD EPYC -> Intel(R) Xeon(R))" in chosen.verdicts[0].message
    assert fix_commands("tiny", "cpu") in chosen.description
    assert "perfgate run --no-gate --scenario tiny" in chosen.description
    assert "perfgate baseline update --run ID" in chosen.description


@pytest.mark.parametrize(
    ("flag", "ci", "expected"),
    [(False, None, False), (False, "true", True), (False, "1", True), (True, None, True),
     (False, "false", False), (False, "", False)],
)  # fmt: skip
def test_ci_or_the_flag_requires_a_reviewed_baseline(
    flag: bool, ci: str | None, expected: bool
) -> None:
    environ = {} if ci is None else {"CI": ci}
    assert requires_baseline(flag, environ) is expected


def test_baseline_changes_do_not_make_the_tree_dirty(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "baselines" / "cpu").mkdir(parents=True)
    (tmp_path / "baselines" / "cpu" / "tiny.json").write_text("{}\n")
    (tmp_path / "perfgate.toml").write_text("# config\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    baselines = tmp_path / "baselines"
    (baselines / "cpu" / "tiny.json").write_text('{"runs": []}\n')
    assert not detect_context(tmp_path, {}, clean_paths=[baselines]).dirty
    assert detect_context(tmp_path, {}).dirty  # without the exclusion it would be
    (tmp_path / "perfgate.toml").write_text("# config, changed\n")
    assert detect_context(tmp_path, {}, clean_paths=[baselines]).dirty


def _must_not_ask() -> list[RunRecord]:
    raise AssertionError("the history must not be asked when a reviewed baseline decides")


def test_locally_an_inconclusive_verdict_does_not_fail_the_run() -> None:
    local = choose_reference(noisy(9), None, lambda: _earlier(0), SCENARIO, require_baseline=False)
    reviewed = choose_reference(
        noisy(1), _reviewed(dict(noisy(1).fingerprint)), list, SCENARIO, require_baseline=False
    )
    for status, fails_locally, fails_reviewed in [
        (Status.PASS, False, False),
        (Status.IMPROVEMENT, False, False),
        (Status.INCONCLUSIVE, False, True),
        (Status.REGRESSION, True, True),
        (Status.INCOMPARABLE, True, True),
    ]:
        verdict = Verdict("output_tok_s", status, "")
        assert local.blocks(verdict) is fails_locally, status
        assert reviewed.blocks(verdict) is fails_reviewed, status


def test_a_local_verdict_takes_one_run_a_reviewed_one_the_scenarios_budget() -> None:
    local = choose_reference(noisy(9), None, lambda: _earlier(0), SCENARIO, require_baseline=False)
    reviewed = choose_reference(
        noisy(1), _reviewed(dict(noisy(1).fingerprint)), list, SCENARIO, require_baseline=False
    )
    assert local.run_budget(3) == 1
    assert reviewed.run_budget(3) == 3


def _pool(a_tok_s: float, b_tok_s: float, b_runs: int):  # type: ignore[no-untyped-def]
    """A reviewed baseline of runs on gpus-a, then `b_runs` on gpus-b, each at its speed (the
    default keep, 5, holds the newest)."""
    baseline = None
    plan = [("gpus-a", a_tok_s, seed) for seed in (0, 1, 2)]
    plan += [("gpus-b", b_tok_s, seed) for seed in range(3, 3 + b_runs)]
    for run_id, (machine, tok_s, seed) in enumerate(plan, start=1):
        m = noisy(seed, tok_s=tok_s)
        baseline = approve_run(
            baseline,
            profile="cpu",
            scenario="tiny",
            fingerprint={**FINGERPRINT, "machine": machine},
            samples=m.samples(),
            phase_ms=m.phase_ms(),
            tolerances={"output_tok_s": 0.03},
            gated=["output_tok_s"],
            run_id=run_id,
            commit="c0",
            approved_by="alice",
            reason="r",
        )
    assert baseline is not None
    return replace(baseline, path=Path("baselines/cpu/tiny.json"))


def _on_b(seed: int, tok_s: float):  # type: ignore[no-untyped-def]
    m = noisy(seed, tok_s=tok_s)
    return replace(m, fingerprint={**FINGERPRINT, "machine": "gpus-b"})


def test_a_machine_with_three_approved_runs_is_judged_by_them_alone() -> None:
    """Machine b runs 9% faster than a (three tolerances): a change that slows b by 6% (two)
    is a regression against b's own approved runs, where against the whole pool, whose spread
    holds both machines' speeds, it is not; unchanged code on b passes."""
    reviewed = _pool(120.0, 130.8, b_runs=3)
    current = _on_b(11, 130.8)
    chosen = choose_reference(current, reviewed, _must_not_ask, SCENARIO, require_baseline=True)
    assert chosen.baseline is not None
    assert [run.machine for run in chosen.baseline.runs] == ["gpus-b"] * 3
    assert chosen.description == (
        "judged against the reviewed baseline baselines/cpu/tiny.json (5 approved run(s)); by "
        "the 3 of this run's machine, gpus-b, alone: other machines' speed is not in its "
        "reference"
    )
    (unchanged,) = judge_measurements([current], chosen.baseline)
    assert unchanged.status is Status.PASS, unchanged
    slowed = _on_b(12, 130.8 * 0.94)
    (own,) = judge_measurements([slowed], chosen.baseline)
    (pooled,) = judge_measurements([slowed], reviewed)
    assert own.status is Status.REGRESSION and pooled.status is not Status.REGRESSION, (own, pooled)


def test_fewer_approved_runs_of_the_machine_judge_by_the_whole_pool() -> None:
    reviewed = _pool(120.0, 120.0, b_runs=2)
    chosen = choose_reference(
        _on_b(11, 120.0), reviewed, _must_not_ask, SCENARIO, require_baseline=True
    )
    assert chosen.baseline is reviewed
    assert chosen.description == (
        "judged against the reviewed baseline baselines/cpu/tiny.json (5 approved run(s))"
    )
