"""`perfgate plan` as a user runs it: refusals before any server starts, and (slow) the
whole command on the shipped tiny models with a real history and report."""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from pathlib import Path

import pytest

from perfgate.plan.compare import observation_of, point_json
from perfgate.plan.forecast import predict
from perfgate.results import RunRecord
from perfgate.store import close_history, list_runs, open_history

from ..conftest import REPO, TINY_SCENARIO, write_config
from ..in_process import perfgate_main

sys.path.insert(0, str(REPO / "benchmarks"))
replan = importlib.import_module("replan")

TREE = TINY_SCENARIO.replace("topk = 1\ndraft_tokens = 4", "topk = 2\ndraft_tokens = 6")


@pytest.mark.parametrize(
    ("flags", "config", "message"),
    [
        (["--topk", "2"], TINY_SCENARIO, "--topk: plans predict chains only (topk = 1)"),
        ([], TREE, "scenarios.tiny.topk: scenario 'tiny' drafts trees (topk = 2)"),
        (["--steps", "1"], TINY_SCENARIO, "--steps: --steps 1 leaves no shorter chain"),
        (["--confirm", "-1"], TINY_SCENARIO, "--confirm: must be >= 0"),
        (["--name", "tiny"], TINY_SCENARIO, "--name: the plan's name 'tiny' is a scenario's"),
        (["--env", "NCCL_PROTO"], TINY_SCENARIO, "--env: 'NCCL_PROTO' is not NAME=VALUE"),
        (
            ["--plain-max-age-h", "0"],
            TINY_SCENARIO,
            "--plain-max-age-h: must be a finite number > 0",
        ),
        (["--budget-s", "nan"], TINY_SCENARIO, "--budget-s: must be a finite number > 0, not nan"),
        (
            ["--json", "perfgate.toml/x.json"],
            TINY_SCENARIO,
            "perfgate.toml: is a file, so --json perfgate.toml/x.json cannot be created under it",
        ),
        (["--markdown", ""], TINY_SCENARIO, "--markdown: is empty: it names no file"),
    ],
)
def test_what_the_model_cannot_plan_is_refused_before_any_server_starts(
    tmp_path: Path, flags: list[str], config: str, message: str
) -> None:
    write_config(tmp_path, config)
    done = perfgate_main("plan", *flags, cwd=tmp_path)
    assert done.returncode == 64, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / ".perfgate").exists()  # nothing launched, nothing recorded


def test_a_tree_scenario_may_plan_its_chains(tmp_path: Path) -> None:
    """--topk 1 is the way to plan a tree scenario's chains; checked up to the launch."""
    write_config(tmp_path, TREE)
    done = perfgate_main("plan", "--topk", "1", "--steps", "1", cwd=tmp_path)
    assert "--steps: --steps 1" in done.stderr  # past the tree refusal, stopped by the next


def runs_in(db: Path) -> list[RunRecord]:
    sessions = open_history(f"sqlite:///{db}")
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)


@pytest.mark.slow
def test_a_plan_of_the_tiny_models_is_predicted_confirmed_recorded_and_reported(
    tmp_path: Path,
) -> None:
    write_config(tmp_path, TINY_SCENARIO.replace("max_new_tokens = 24", "max_new_tokens = 16"))
    done = perfgate_main(
        *("plan", "--steps", "4", "--confirm", "1", "--repeats", "2"),
        *("--db", "sqlite:///plans.db", "--json", "p.json"),
        cwd=tmp_path,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: a near tie on a busy CPU
    assert "| steps | tok/s | speedup | accept length |" in done.stdout
    assert "Predicted best: steps=" in done.stdout and "Runner time: " in done.stdout
    document = json.loads((tmp_path / "p.json").read_text())
    (plan,) = document["plans"]
    assert [p["steps"] for p in plan["predicted"]] == [1, 2, 3, 4]
    assert all(1 <= p["accept_length"][0] <= p["steps"] + 1 for p in plan["predicted"])
    # At the profiled steps the prediction is the run itself.
    assert plan["predicted"][3]["output_tok_s"][0] == pytest.approx(
        plan["profiled"]["output_tok_s"]
    )
    # The profiled server timed its verify at 2 tokens a sequence and at its own 5, and the
    # prediction's verify rests on those timings, not on the plain step's line.
    (timed,) = [n for n in plan["notes"] if n.startswith("verify from the run's own timing")]
    assert " ms at 2, " in timed and " ms at 5 tokens a sequence" in timed
    assert f"Note: {timed}." in done.stdout
    runs = runs_in(tmp_path / "plans.db")
    best = document["predicted_best"]["steps"]
    assert [r.measurement.config["steps"] for r in runs] == [4] + ([best] if best != 4 else [])
    entry = runs[0].measurement.config["plan"]
    assert entry["role"] == "profiled"
    # The observation is recorded with the prediction, and gives it back: a later model can be
    # judged on this run without launching it again (benchmarks/replan.py).
    again = predict(observation_of(entry["observation"]), entry["seed"], entry["replicates"])
    assert [point_json(p) for p in again.points] == entry["predicted"]
    replanned = tmp_path / "replan.txt"
    with replanned.open("w") as out, contextlib.redirect_stdout(out):
        assert replan.main(["--db", f"sqlite:///{tmp_path / 'plans.db'}"]) == 0
    rows = [line for line in replanned.read_text().splitlines() if line[:3] in {"| 1", "| 4"}]
    assert len(rows) == 2 and all(row.split("|")[2] == row.split("|")[3] for row in rows)
    if best != 4:
        (confirmed,) = document["confirmed"]
        assert runs[1].measurement.config["plan"]["error"] == confirmed["error"]
        # The confirmation's costs refit every step count's prediction.
        assert [p["steps"] for p in plan["refit"]] == [1, 2, 3, 4]
        assert f"through the step counts measured ({best}, 4)" in done.stdout
    else:
        assert plan["refit"] == [] and "Refit:" not in done.stdout
    # A second plan takes the plain twin from the history where --plain-max-age-h allows: one
    # launch, the profiled server's, and its run says whose plain figures it carries (the same
    # repeats: they shape the plain twin, so they are part of its reuse key).
    again_done = perfgate_main(
        *("plan", "--steps", "4", "--confirm", "0", "--repeats", "2", "--name", "again"),
        *("--db", "sqlite:///plans.db", "--plain-max-age-h", "24"),
        cwd=tmp_path,
    )
    assert again_done.returncode in (0, 1), again_done.stdout + again_done.stderr
    assert f"(reused from run {runs[0].id}, plain_max_age_h)" in again_done.stdout
    assert "Runner time: " in again_done.stdout and "(plain twin reused and" in again_done.stdout
    (profiled_again,) = runs_in(tmp_path / "plans.db")[len(runs) :]
    assert profiled_again.measurement.plain.reused_from == runs[0].id
    report = perfgate_main("report", "--db", "sqlite:///plans.db", "--out", "r.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "Plans: predicted against measured" in (tmp_path / "r.html").read_text()
