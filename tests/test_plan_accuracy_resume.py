"""benchmarks/plan_accuracy.py --work: a command that ended in an earlier call (of a lent
machine, whose calls last ten minutes) is not run again, wherever its tables go now."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_an_ended_command_is_taken_from_the_work_folder_not_run_again(tmp_path: Path) -> None:
    accuracy = importlib.import_module("plan_accuracy")
    runs = tmp_path / "runs.txt"
    count = f"open({str(runs)!r}, 'a').write('ran\\n'); print('table')"

    def command(out: str) -> list[str]:  # as a sweep's: its tables go to this call's folder
        return [sys.executable, "-c", count, "--json", f"{out}/s.json", "--markdown", "m"]

    done = tmp_path / "work" / "sweep-1.done.json"
    done.parent.mkdir()
    first = accuracy.run(command("OUT1"), tmp_path / "first.log", done)
    again = accuracy.run(command("OUT2"), tmp_path / "again.log", done)
    assert runs.read_text() == "ran\n"  # the second call took it from the work folder
    assert (again.code, again.stdout, again.wall_s) == (0, "table\n", first.wall_s)
    other = [sys.executable, "-c", count, "--steps", "2"]  # another command: it runs
    accuracy.run(other, tmp_path / "other.log", done)
    assert runs.read_text() == "ran\nran\n"


def test_several_rounds_are_judged_on_their_medians(tmp_path: Path) -> None:
    """Two rounds whose launches ran 10% apart, each prediction off by that launch's level:
    every round misses 5%, their medians meet it; the table and the goals say which is which."""
    accuracy = importlib.import_module("plan_accuracy")

    def one(index: int, level: float) -> Any:
        swept = {k: {"output_tok_s": level * (100 - k)} for k in (1, 2, 3)}
        guess = (2 - level) * 1.0
        document = {
            "plans": [
                {
                    "predicted": [
                        {"steps": k, "output_tok_s": [guess * (100 - k)] * 3} for k in (1, 2, 3)
                    ],
                    "refit": [{"steps": k, "output_tok_s": [100 - k] * 3} for k in (1, 2, 3)],
                }
            ]
        }
        document["predicted_best"] = {"steps": 1 if index == 1 else 2}
        planned = {3: {"output_tok_s": 97.0, "run": 1}}
        command = accuracy.Command([], 1.0, 0, "", "")
        return accuracy.Round(index, command, command, swept, planned, document)

    rounds = [one(1, 0.95), one(2, 1.05)]
    lines, pooled = accuracy.pooled_section(rounds)
    # Each round's prediction is off by its launch's level alone: its shape is the sweep's.
    assert "| 2 | 98.0 | 98.0 | +0.0% | 98.0 | +0.0% | +0.0% |" in lines
    assert "| 3 | 97.0 | 97.0 | +0.0% |  |  |  |" in lines  # the plans measured 3: no refit
    assert accuracy.shape_errors(rounds) == pytest.approx({1: 0.0, 2: 0.0})
    skewed = one(3, 1.0)  # its 1-step prediction 10% fast against its own profiled run's
    skewed.document["plans"][0]["predicted"][0]["output_tok_s"] = [99.0 * 1.1] * 3
    assert accuracy.shape_errors([skewed]) == pytest.approx({1: 0.1, 2: 0.0})
    assert pooled == {"worst_error": 0.0, "worst_refit_error": 0.0, "shortfall": 0.0}
    # Named best once each: the smaller step count, the sweeps' best on the medians too.
    assert "The plans named steps=1 best in 1 of 2 rounds" in lines[-1]
    found = [
        {
            "shortfall": 0.04,
            "worst_error": e,
            "worst_refit_error": None,
            "plan_s": 1,
            "sweep_s": 4,
            "profile_s": 1,
        }
        for e in (0.105, -0.095)
    ]
    table = "\n".join(accuracy.goals(found, pooled))
    each = "within 5% of the measured | largest 0.0% (medians over the rounds; one round's 10.5%)"
    assert each + " | met |" in table
    assert "| 0.0% short (medians over the rounds; one round's 4.0%) | met |" in table
    alone = "\n".join(accuracy.goals(found))  # one round's figures, judged as they are
    assert "medians" not in alone
    assert "| largest 10.5% | **missed** |" in alone and "| 4.0% short | **missed** |" in alone


def test_a_plan_that_reused_its_plain_twin_is_costed_against_the_sweep_less_its_own() -> None:
    """--plain-max-age-h: the sweep measured the plain twin (10 s of its 110), the plan reused
    it (30 s): like for like the plan costs 30 of 100 s, the goal met; the 27% against the
    whole sweep is said beside. A plan that measured its own is judged on the whole sweep."""
    accuracy = importlib.import_module("plan_accuracy")
    command = accuracy.Command([], 110.0, 0, "", "")
    plan = accuracy.Command([], 30.0, 0, "", "")
    document = {"plans": [{"plain_reused_from": 1}]}
    sweep = {"plain_s": {"s": 10.0}, "plain_reused_from": {}}
    r = accuracy.Round(1, command, plan, {}, {}, document, sweep)
    assert accuracy.plain_twins(r) == (10.0, True)
    found = [{"plan_s": 30.0, "sweep_s": 110.0, "profile_s": 20.0, "like_sweep_s": 100.0}]
    table = "\n".join(accuracy.goals([{**found[0], "plan_reused_plain": True}]))
    assert (
        "| 30% (the whole command, confirmations included; like for like: the plain twin" in table
    )
    assert "27% against the whole sweep); 20% for the prediction alone | met (" in table
    measured = "\n".join(accuracy.goals([{**found[0], "plan_reused_plain": False}]))
    assert "| 27% (the whole command, confirmations included; the plain twin measured" in measured
    # A sweep that reused its own plain twin spent no plain seconds to take off.
    again = accuracy.Round(
        2, command, plan, {}, {}, document, {**sweep, "plain_reused_from": {"s": 1}}
    )
    assert accuracy.plain_twins(again) == (0.0, True)


def test_the_seeded_gpu_config_is_the_shipped_gpu_scenario_but_for_its_weights() -> None:
    from dataclasses import replace

    from perfgate.config import load_config

    shipped = load_config(REPO / "perfgate.toml").scenarios["embedded-large-gpu"]
    seeded = load_config(REPO / "benchmarks" / "plan-gpu-seeded.toml").scenarios[
        "embedded-large-gpu-seeded"
    ]
    assert seeded.extra_args == (*shipped.extra_args, "--load-format", "dummy")
    assert seeded.spec_extra_args == ("--debug-simulate-accept-rate", "0.7")
    same = replace(
        seeded,
        name=shipped.name,
        extra_args=shipped.extra_args,
        spec_extra_args=shipped.spec_extra_args,
        equivalence=shipped.equivalence,
    )
    assert same == shipped


def test_a_sweep_that_cannot_measure_stops_the_round_and_keeps_the_record(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A lent machine that lost its trained weights: the sweep exits 69. `--only sweep` exits 1
    with the sweep's own reason (not 'swept'), no plan is launched against nothing, and the
    record from an earlier call is not overwritten by an empty one."""
    accuracy = importlib.import_module("plan_accuracy")
    launched = tmp_path / "launched.txt"
    failing = (
        f"import sys; open({str(launched)!r}, 'a').write(sys.argv[1] + '\\n'); "
        "print('perfgate: error: trained weights missing: train them once', file=sys.stderr); "
        "sys.exit(69)"
    )

    def perfgate(*args: str) -> list[str]:  # the command's name as argv[2], as perfgate()'s
        return [sys.executable, "-c", failing, args[0], *args[1:]]

    monkeypatch.setattr(accuracy, "perfgate", perfgate)
    out = tmp_path / "plan-gpu.md"
    out.write_text("the record of an earlier call\n")
    base = ["plan_accuracy.py", "--out", str(out), "--work", str(tmp_path / "work")]

    monkeypatch.setattr(sys, "argv", [*base, "--only", "sweep"])
    assert accuracy.main() == 1
    said = capsys.readouterr().out
    assert "trained weights missing" in said and "nothing to plan against" in said
    assert "swept;" not in said

    monkeypatch.setattr(sys, "argv", base)
    assert accuracy.main() == 1
    said = capsys.readouterr().out
    assert "trained weights missing" in said and f"{out} left as it was" in said
    assert launched.read_text() == "sweep\nsweep\n"  # the failed sweep ran again; no plan ran
    assert out.read_text() == "the record of an earlier call\n"
