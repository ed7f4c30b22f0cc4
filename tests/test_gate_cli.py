"""`perfgate gate` and `perfgate baseline update/show/migrate` on a history built in-process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baselines import Baseline, load_baseline
from perfgate.cli import main
from perfgate.config import load_config
from perfgate.gate import Status, Verdict, overall_status
from perfgate.pipeline import ScenarioRun, record_linked
from perfgate.reference import status_exit_code
from perfgate.results import RunContext, RunRecord
from perfgate.store import open_history

from .conftest import TINY_SCENARIO, write_config
from .factories import QueuedMeasurer
from .test_judging import noisy

CONFIG = TINY_SCENARIO.replace(
    """output_tok_s = 0.6
speedup = 0.6
accept_length = 0.05
verify_ms = 0.6""",
    """output_tok_s = 0.03
speedup = 0.03
accept_length = 0.03
verify_ms = 0.03""",
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A config and a history holding five clean runs (ids 1-5) of the same code."""
    write_config(tmp_path, CONFIG)
    clean = [RunRecord(noisy(seed), RunContext(commit="c0"), (), Status.PASS) for seed in range(5)]
    record(tmp_path, clean)
    return tmp_path


def record(project: Path, records: list[RunRecord]) -> list[int]:
    """Record runs in the project's history (linked, as a session does); return their ids."""
    sessions = open_history(f"sqlite:///{project / 'history.db'}")
    with sessions.begin() as session:
        return [r.id or 0 for r in record_linked(session, records)]


def cli(project: Path, *args: str) -> int:
    return main([*args, "--config", str(project / "perfgate.toml")])


def approve(project: Path, *ids: int) -> int:
    runs = [arg for i in ids for arg in ("--run", str(i))]
    return cli(project, "baseline", "update", *runs, "--approved-by", "alice", "--reason", "r")


def test_approve_then_judge_a_slower_verify_with_attribution(project: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert approve(project, 1, 2, 3, 4, 5) == 0
    document = json.loads((project / "baselines" / "cpu" / "tiny.json").read_text())
    assert [r["run_id"] for r in document["runs"]] == [1, 2, 3, 4, 5]
    assert document["runs"][0]["phase_ms"]["spec"]["verify"]
    (slow,) = record(project, [RunRecord(noisy(10, 104.0, 24.0), RunContext(), (), Status.PASS)])
    capsys.readouterr()

    assert cli(project, "gate", "--run", str(slow), "--json") == 1
    result = json.loads(capsys.readouterr().out)
    verdicts = {v["metric"]: v for v in result["verdicts"]}
    assert result["status"] == "regression" and result["runs"] == [slow]
    assert verdicts["verify_ms"]["status"] == "regression"
    why = verdicts["output_tok_s"]["attribution"]
    assert why["summary"].startswith("output_tok_s -14.")
    assert {p["phase"]: round(p["share"], 1) for p in why["phases"]}["verify"] == 1.0
    assert verdicts["output_tok_s"]["ci_high"] < -0.03

    assert cli(project, "gate", "--run", str(slow)) == 1
    out = capsys.readouterr().out
    assert "tiny on cpu: run #6 REGRESSION" in out
    said = " ".join(out.split())  # the why lines wrap at 100 columns
    assert "why: output_tok_s -14." in said and "verify +3.8 ms/cycle" in said


def test_the_same_code_passes_and_a_rerun_verdict_brings_its_runs(project: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert approve(project, 1, 2, 3, 4, 5) == 0
    first = RunRecord(
        noisy(11),
        RunContext(),
        (Verdict("output_tok_s", Status.INCONCLUSIVE, ""),),
        Status.INCONCLUSIVE,
    )
    second = RunRecord(
        noisy(12), RunContext(), (Verdict("output_tok_s", Status.PASS, ""),), Status.PASS
    )
    ids = record(project, [first, second])
    capsys.readouterr()
    assert cli(project, "gate", "--run", str(ids[1])) == 0
    out = capsys.readouterr().out
    assert f"judging run #{ids[0]}, #{ids[1]} again" in out
    assert "judged against the reviewed baseline " in " ".join(out.split())  # wrapped at 100
    assert f"(judged with run #{ids[0]})" in out
    assert "  output_tok_s" in out and " 2/5  pass" in out


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: replace(r, context=RunContext(dirty=True)), "uncommitted changes"),
        (
            lambda r: replace(r, verdicts=(Verdict("speedup", Status.INCONCLUSIVE, ""),)),
            "speedup was inconclusive",
        ),
        (
            lambda r: replace(r, measurement=replace(r.measurement, fingerprint={"gpu": "H200"})),
            "environment differs from the baseline's (engine, gpu, perfgate, torch)",
        ),
    ],
    ids=["dirty", "inconclusive", "other-environment"],
)
def test_approval_refuses_unless_forced(project: Path, capsys, change, problem: str) -> None:  # type: ignore[no-untyped-def]
    assert approve(project, 1) == 0
    (bad,) = record(project, [change(RunRecord(noisy(13), RunContext(), (), Status.PASS))])
    capsys.readouterr()
    assert approve(project, bad) == 64
    assert problem in capsys.readouterr().err
    forced = ["--run", str(bad), "--approved-by", "a", "--reason", "r", "--force"]
    assert cli(project, "baseline", "update", *forced) == 0


@pytest.mark.parametrize(("flag", "value"), [("--approved-by", ""), ("--reason", "  ")])
def test_an_approval_without_who_or_why_is_refused_naming_the_flag(  # type: ignore[no-untyped-def]
    project: Path, capsys, flag: str, value: str
) -> None:
    given = {"--approved-by": "a", "--reason": "r", flag: value}
    args = [item for pair in given.items() for item in pair]
    assert cli(project, "baseline", "update", "--run", "1", *args) == 64
    assert f"perfgate: error: {flag}: is empty" in capsys.readouterr().err
    assert not (project / "baselines" / "cpu" / "tiny.json").exists()


def test_show_and_migrate_a_schema_1_file(project: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert approve(project, 1, 2, 3) == 0
    path = project / "baselines" / "cpu" / "tiny.json"
    document = json.loads(path.read_text())
    document["schema_version"] = 1
    for run in document["runs"]:
        del run["phase_ms"]
    path.write_text(json.dumps(document))
    assert cli(project, "baseline", "show", "--scenario", "tiny", "--profile", "cpu") == 0
    out = capsys.readouterr().out
    assert "schema 1, 3 approved run(s)" in out and "phases: none recorded" in out
    assert cli(project, "baseline", "migrate") == 0
    assert "schema 1 -> 2, phase means for 3 of 3 run(s) from the history" in (
        capsys.readouterr().out
    )
    assert cli(project, "baseline", "show", "--scenario", "tiny", "--profile", "cpu") == 0
    out = capsys.readouterr().out
    assert "schema 2" in out and "phases, mean ms per cycle: draft 1" in out
    assert out.count("  output_tok_s") == 1


def test_bad_input_is_named(project: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli(project, "gate", "--run", "99") == 64
    assert "--run: no run 99 in the history" in capsys.readouterr().err
    huge = "99999999999999999999999"  # beyond the history's 64-bit integers
    for command in (("gate", "--run", huge), ("baseline", "update", "--run", huge, "--approved-by", "a", "--reason", "r")):  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            cli(project, *command)
        assert refused.value.code == 64
        assert f"argument --run: '{huge}' is not a run id: a whole number from 1 to " in (
            capsys.readouterr().err
        )
    assert approve(project, 1) == 0
    assert cli(project, "gate", "--run", "1", "--alpha", "2") == 64
    assert "--alpha: is 2.0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ("gate", "--run", "1"),
        ("baseline", "show", "--scenario", "tiny", "--profile", "cpu"),
        ("baseline", "update", "--run", "1", "--approved-by", "alice", "--reason", "r"),
        ("baseline", "migrate"),
        ("doctor", "--profile", "cpu"),
        ("run", "--profile", "cpu"),
    ],
)
def test_a_folder_where_a_baseline_file_belongs_is_named(
    project: Path, capsys, command: tuple[str, ...]
) -> None:  # type: ignore[no-untyped-def]
    folder = project / "baselines" / "cpu" / "tiny.json"
    folder.mkdir(parents=True)
    assert cli(project, *command) == 64
    out, err = capsys.readouterr()
    assert f"{folder}: is a folder, not a baseline file" in out + err
    assert "a baseline is a JSON file (baselines/PROFILE/SCENARIO.json)" in out + err
    assert list(folder.iterdir()) == [] and not (project / ".perfgate" / "runs").exists()


def test_a_baselines_folder_that_is_a_file_is_refused_before_approving(
    project: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    config = project / "perfgate.toml"
    assert approve(project, 1) == 0  # the config's folder
    assert cli(project, "baseline", "update", "--run", "2", "--approved-by", "a", "--reason", "r",
               "--baselines", str(config)) == 64  # fmt: skip
    assert capsys.readouterr().err == (
        f"perfgate: error: {config}: is a file, not a folder --baselines can write into; move "
        "that file away, or pass another --baselines DIR\n"
    )
    assert "run_id" not in config.read_text()


def test_a_folder_given_as_the_baseline_file_is_named(project: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (project / "baselines").mkdir()
    assert cli(project, "gate", "--run", "1", "--baseline", str(project / "baselines")) == 64
    assert f"{project / 'baselines'}: is a folder, not a baseline file" in capsys.readouterr().err


def test_runs_of_two_scenarios_are_neither_judged_nor_approved_together(
    project: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    other = replace(noisy(7), scenario="other")
    (foreign,) = record(project, [RunRecord(other, RunContext(), (), Status.PASS)])
    capsys.readouterr()
    assert cli(project, "gate", "--run", "1", "--run", str(foreign)) == 64
    assert "--run: the runs belong to different scenarios (other on cpu, tiny on cpu); judge " in (
        capsys.readouterr().err
    )
    assert approve(project, 1, foreign) == 64
    assert "--run: the runs belong to different baselines (other on cpu, tiny on cpu); approve" in (
        capsys.readouterr().err
    )
    assert not (project / "baselines").exists()  # nothing written


def test_a_run_without_a_reviewed_baseline_is_judged_again_against_its_machine(
    project: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    assert cli(project, "gate", "--run", "5") == 0
    out = capsys.readouterr().out
    assert "judged against 4 earlier runs on this machine (#1, #2, #3, #4); no reviewed " in out
    assert "output_tok_s" in out and "pass" in out
    assert cli(project, "gate", "--run", "1") == 0
    assert "first run of tiny on this machine" in capsys.readouterr().out
    # Against one earlier run a verdict claims nothing; locally that fails nothing, as in the
    # session that recorded the run.
    assert cli(project, "gate", "--run", "2") == 0
    out = capsys.readouterr().out
    assert "judged against 1 earlier run on this machine (#1)" in out and "INCONCLUSIVE" in out
    monkeypatch.setenv("CI", "true")
    assert cli(project, "gate", "--run", "5") == 64
    err = capsys.readouterr().err
    assert "tiny.json: no reviewed baseline for scenario 'tiny' on runner profile 'cpu'" in err
    assert "perfgate run --no-gate --scenario tiny" in err
    assert "perfgate baseline update --run ID" in err


def _session_verdicts(project: Path, baseline: Baseline, alpha: float) -> ScenarioRun:
    """One scenario's loop as a session runs it: tok/s near the tolerance, up to 3 runs."""
    measurer = QueuedMeasurer(*(noisy(seed, tok_s=116.15) for seed in (115, 116, 117)))
    scenario = load_config(project / "perfgate.toml").scenarios["tiny"]
    run = ScenarioRun(scenario, project, measurer)
    run.judge(baseline, alpha=alpha)
    return run


@pytest.mark.parametrize("scenarios", [1, 2], ids=["one-scenario", "two-scenarios"])
def test_gate_judges_a_run_again_as_its_session_did(project: Path, capsys, scenarios: int) -> None:  # type: ignore[no-untyped-def]
    assert approve(project, 1, 2, 3, 4, 5) == 0
    baseline = load_baseline(project / "baselines" / "cpu" / "tiny.json")
    # A session of `scenarios` scenarios gives each its share of the config's alpha (0.2).
    run = _session_verdicts(project, baseline, alpha=0.2 / scenarios)
    undivided = _session_verdicts(project, baseline, alpha=0.2)
    status = overall_status(run.looks[-1])
    assert (status != overall_status(undivided.looks[-1])) == (scenarios > 1), "a telling case"
    ids = record(project, run.records(RunContext()))
    capsys.readouterr()
    code = cli(project, "gate", "--run", str(ids[-1]), "--json")
    result = json.loads(capsys.readouterr().out)
    assert result["runs"] == ids
    assert result["status"] == status.value and code == int(status_exit_code(status))
    again = {v["metric"]: (v["status"], v["alpha"]) for v in result["verdicts"]}
    assert again == {v.metric: (v.status.value, pytest.approx(v.alpha)) for v in run.looks[-1]}


def _on(machine: str, seed: int) -> RunRecord:
    """A clean run of the tiny scenario on one machine of a pool (the fingerprint names it)."""
    measured = noisy(seed)
    fingerprint = {**measured.fingerprint, "machine": machine}
    return RunRecord(
        replace(measured, fingerprint=fingerprint), RunContext(commit="c0"), (), Status.PASS
    )


def test_a_pool_shares_a_baseline_and_a_verdict_names_a_machine_it_never_saw(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    write_config(tmp_path, CONFIG)
    pool = record(tmp_path, [_on("gpus-a", 0), _on("gpus-a", 1), _on("gpus-b", 2)])
    # Without a reviewed baseline a run is judged against its own machine's runs alone.
    (first_on_c,) = record(tmp_path, [_on("gpus-c", 3)])
    assert cli(tmp_path, "gate", "--run", str(first_on_c)) == 0
    assert "first run of tiny on this machine" in capsys.readouterr().out

    assert approve(tmp_path, *pool) == 0  # two machines, one environment: one baseline
    document = json.loads((tmp_path / "baselines" / "cpu" / "tiny.json").read_text())
    assert [r["machine"] for r in document["runs"]] == ["gpus-a", "gpus-a", "gpus-b"]
    assert "machine" not in document["fingerprint"]
    capsys.readouterr()
    assert cli(tmp_path, "baseline", "show", "--scenario", "tiny", "--profile", "cpu") == 0
    shown = capsys.readouterr().out
    assert f"run #{pool[2]} (on gpus-b) approved by alice at " in shown
    (on_b, on_c) = record(tmp_path, [_on("gpus-b", 4), _on("gpus-c", 5)])
    capsys.readouterr()
    assert cli(tmp_path, "gate", "--run", str(on_b)) == 0
    assert "ran none of them" not in " ".join(capsys.readouterr().out.split())
    assert cli(tmp_path, "gate", "--run", str(on_c)) == 0  # judged as ever: a note, no status
    said = " ".join(capsys.readouterr().out.split())  # wrapped at 100 columns
    assert "(3 approved run(s)); this run's machine, gpus-c, ran none of them (they ran on " in said
    assert "gpus-a, gpus-b): a machine's own speed is not in their spread" in said
