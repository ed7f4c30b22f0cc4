"""benchmarks/gpu_gate_proof.sh and its helpers: usage, the injection it sizes, the tables it
joins, the simulation it is planned on (run end to end on the CPU with --smoke, by hand)."""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.fingerprint import scenario_digest

from .conftest import REPO

BENCHMARKS = REPO / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


def test_an_unknown_stage_exits_64_naming_the_stages(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_gate_proof.sh"), str(tmp_path / "out"), "verdict"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "STATE": str(tmp_path / "state")},
    )
    assert done.returncode == 64
    assert (
        "unknown stage 'verdict'; stages are train, diagnose, launch, approve, machine, verdicts"
        in (done.stderr)
    )


def proof_script(
    tmp_path: Path, cure: str, *stages: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_gate_proof.sh"), str(tmp_path / "out"), *stages],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "STATE": str(tmp_path / "state"), "CURE": cure, **env},
    )


def test_a_cure_is_one_the_diagnosis_measures_and_a_series_keeps_its_own(tmp_path: Path) -> None:
    done = proof_script(tmp_path, "one-cpu", "launch")
    assert done.returncode == 64
    assert "CURE=one-cpu: one of as-placed, gpu-local, hash-seed, fastest-cpus, no-aslr" in (
        done.stdout + done.stderr
    )
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "cure").write_text("gpu-local\n")
    done = proof_script(tmp_path, "hash-seed", "verdicts")
    assert done.returncode == 64
    assert "launched with CURE=gpu-local" in done.stdout + done.stderr
    assert not (tmp_path / "state" / "verdicts.jsonl").exists()  # nothing measured


@pytest.mark.slow  # two interpreters importing torch (launch_states.py): seconds
def test_a_run_placed_by_a_cure_inherits_its_cpus_and_environment() -> None:
    probe = "import os; print(len(os.sched_getaffinity(0)), os.environ.get('PYTHONHASHSEED'))"
    placed = [sys.executable, str(BENCHMARKS / "launch_states.py"), "--run-as"]
    done = subprocess.run([*placed, "hash-seed", "--device", "cpu", "--", sys.executable, "-c",
                           probe], capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.split()[1] == "0"
    refused = subprocess.run([*placed, "one-cpu", "--", "true"], capture_output=True, text=True,
                             check=False)  # fmt: skip
    assert refused.returncode == 64 and "as-placed, gpu-local, hash-seed" in refused.stderr
    # Without address randomisation, the command and what it starts: the same addresses.
    # A machine may refuse the personality (a container's seccomp profile): then it says so.
    layout = "import os; print(open('/proc/self/personality').read().strip(), id(object()))"
    runs = [
        subprocess.run([*placed, "no-aslr", "--device", "cpu", "--", sys.executable, "-c",
                        layout], capture_output=True, text=True, check=False)
        for _ in range(2)
    ]  # fmt: skip
    if runs[0].returncode == 69:
        assert "--run-as no-aslr: this machine refuses it" in runs[0].stderr
    else:
        seen = [run.stdout.split() for run in runs]
        assert [run.returncode for run in runs] == [0, 0]
        assert int(seen[0][0], 16) & 0x0040000 and seen[0] == seen[1]
    # On the CPUs fastest at its start: a quarter of those allowed, two at least.
    cpus = "import os; print(sorted(os.sched_getaffinity(0)))"
    fastest = subprocess.run([*placed, "fastest-cpus", "--device", "cpu", "--", sys.executable,
                              "-c", cpus], capture_output=True, text=True, check=True)  # fmt: skip
    chosen = json.loads(fastest.stdout)
    allowed = sorted(os.sched_getaffinity(0))
    assert len(chosen) == min(len(allowed), max(2, len(allowed) // 4))
    assert set(chosen) <= set(allowed)


def test_the_tok_s_injection_is_sized_from_the_baseline_s_own_figures() -> None:
    proof = importlib.import_module("gate_proof")
    # The record's GPU scenario: 2048 tokens at 11680 tok/s, 68 cycles of 2.086 ms.
    run = {"samples": {"output_tok_s": [11680.0], "accept_length": [3.765]},
           "phase_ms": {"spec": {"cycle": [2.086]}}}  # fmt: skip
    fraction = proof.injection_fraction([run], 2048, 256)
    repeat_ms, decode_ms = 2048 / 11680 * 1000, 256 / 3.765 * 2.086
    assert abs(repeat_ms / (repeat_ms + fraction * decode_ms) - 0.94) < 1e-9  # tok/s -6%


def test_the_verdict_table_counts_each_kind(tmp_path: Path) -> None:
    proof = importlib.import_module("gate_proof")
    rows = [
        {"kind": kind, "run": n, "exit": code, "status": status, "metrics": {}, "runs": 2,
         "planned_runs": 2, "run_budget": 6, "runner_s": 104.0, "wall_s": 110, "why": {}}
        for n, (kind, code, status) in enumerate(
            [("unchanged", 0, "pass"), ("verify_plus_2", 1, "regression")], 1
        )
    ]  # fmt: skip
    (tmp_path / "verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = "\n".join(proof._verdicts(tmp_path / "verdicts.jsonl"))
    assert "| unchanged | 1 | 0 | 1 | 0 | 2.00 | 104 s |" in text
    assert "| verify_plus_2 | 1 | 1 | 0 | 0 | 2.00 | 104 s |" in text


def test_the_verdict_table_says_whose_approved_runs_judged_each_verdict(tmp_path: Path) -> None:
    proof = importlib.import_module("gate_proof")
    from perfgate.baselines import Baseline, BaselineRun
    from perfgate.reference import machine_reference

    def words(machines: list[str], here: str) -> str:
        """What perfgate says of a run on `here` judged against runs of `machines`."""
        runs = tuple(
            BaselineRun(run_id=i, approved_by="a", approved_at="t", reason="r", commit=None,
                        samples={}, machine=m)
            for i, m in enumerate(machines, 1)
        )  # fmt: skip
        baseline = Baseline(profile="p", scenario="s", keep=13, gated=(), tolerances={},
                            fingerprint={}, runs=runs)  # fmt: skip
        return (
            "judged against the reviewed baseline"
            + machine_reference(baseline, {"machine": here})[1]
        )

    pool = words(["gpus-a"] * 10, "gpus-a")
    unseen = words(["gpus-a"] * 10, "gpus-e")  # "this run's machine, gpus-e, ran none of them"
    own = words(["gpus-a"] * 10 + ["gpus-e"] * 3, "gpus-e")
    rows = [
        {"kind": "unchanged", "run": n, "exit": 0, "status": "pass", "metrics": {}, "runs": 1,
         "planned_runs": 1, "run_budget": 10, "runner_s": 36.0, "wall_s": 38, "why": {}, **extra}
        for n, extra in enumerate(
            [{}, {"baseline_runs": 13, "judged_against": pool},
             {"baseline_runs": 10, "judged_against": unseen},
             {"baseline_runs": 3, "judged_against": own}], 1
        )
    ]  # fmt: skip
    (tmp_path / "verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = proof._verdicts(tmp_path / "verdicts.jsonl")
    assert [line.split(" | ")[9] for line in lines[2:6]] == [
        "-", "13 (all)", "10 (all)", "3 of its machine",
    ]  # fmt: skip


def test_the_gpu_simulation_catches_a_slower_verify_at_the_chosen_tolerances() -> None:
    gpu = importlib.import_module("gate_quality_gpu")
    (chosen,) = [s for s in gpu.gpu_settings() if s.name == "chosen, 10 approved"]
    assert dict(chosen.tolerances) == gpu.CHOSEN
    _, _, tally = gpu.run_gpu_cell((chosen, "verify +2%", 20, 1))
    assert tally.trials == 20 and tally.regressions["verify_ms"] == 20
    assert 1 <= tally.runs / 20 <= gpu.BUDGET_RUNS


def test_without_perfgate_s_own_dependencies_or_their_wheels_it_exits_69(tmp_path: Path) -> None:
    bare = tmp_path / "python3"  # an interpreter that imports nothing
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    (tmp_path / "wheels").mkdir()
    done = proof_script(
        tmp_path, "as-placed", "launch", PYTHON=str(bare), WHEELS=str(tmp_path / "wheels")
    )
    assert done.returncode == 69
    assert "cannot import sqlalchemy, alembic and mako" in done.stdout + done.stderr
    assert not (tmp_path / "state" / "launch-runs.txt").exists()


def test_a_capped_copy_of_the_config_is_the_shipped_scenario_but_for_its_runs(
    tmp_path: Path,
) -> None:
    proof = importlib.import_module("gate_proof")
    out = tmp_path / "capped.toml"
    shipped = load_config(REPO / "perfgate.toml").scenarios["embedded-large-gpu"]
    args = ["config", "--config", str(REPO / "perfgate.toml"), "--scenario"]
    assert proof.main([*args, "embedded-large-gpu", "--max-runs", "1", "--out", str(out)]) == 0
    capped = load_config(out).scenarios["embedded-large-gpu"]
    assert (capped.max_runs, shipped.max_runs) == (1, 10)
    assert scenario_digest(capped) == scenario_digest(shipped)  # the same runs' fingerprint
    assert proof.main([*args, "embedded-large-gpux", "--max-runs", "1", "--out", str(out)]) == 64
    # A scenario without max_runs gets one, and keeps everything else.
    assert proof.main([*args, "embedded-default", "--max-runs", "2", "--out", str(out)]) == 0
    assert load_config(out).scenarios["embedded-default"].max_runs == 2


def test_quick_s_runs_a_verdict_are_checked_and_kept_by_its_series(tmp_path: Path) -> None:
    done = proof_script(tmp_path, "as-placed", "verdicts", MAX_RUNS="none", PYTHON=sys.executable)
    assert done.returncode == 64 and "MAX_RUNS=none: a whole number" in done.stdout + done.stderr
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "max-runs").write_text("1\n")
    done = proof_script(tmp_path, "as-placed", "verdicts", MAX_RUNS="3", PYTHON=sys.executable)
    assert done.returncode == 64 and "take at most 1 runs" in done.stdout + done.stderr
    done = proof_script(tmp_path, "as-placed", "verdicts", QUICK="1", PYTHON=sys.executable)
    assert done.returncode == 1  # QUICK's 1 run a verdict, but no series approved yet
    assert "no approved series yet" in done.stdout
    capped = load_config(tmp_path / "state" / "perfgate-max-runs.toml")
    assert capped.scenarios["embedded-large-gpu"].max_runs == 1


def _history(path: Path, runs: dict[int, tuple[bool, list[float]]]) -> Path:
    """A history of the tables launch_noise.py reads: per run, judged or not, its tok/s."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (id INTEGER, scenario TEXT)")
        db.execute("CREATE TABLE verdicts (run_id INTEGER)")
        db.execute("CREATE TABLE samples (run_id, mode, metric, repeat, value)")
        for run, (judged, values) in runs.items():
            db.execute("INSERT INTO runs VALUES (?, 'gpu')", (run,))
            if judged:
                db.execute("INSERT INTO verdicts VALUES (?)", (run,))
            for repeat, value in enumerate(values):
                for metric in ("output_tok_s", "speedup", "verify_ms", "accept_length"):
                    db.execute(
                        "INSERT INTO samples VALUES (?, 'spec', ?, ?, ?)",
                        (run, metric, repeat, value),
                    )
                db.execute(
                    "INSERT INTO samples VALUES (?, 'spec', 'decode_tok_s', ?, 50.0)",
                    (run, repeat),
                )
    return path


def test_the_gpu_simulation_takes_its_noise_from_a_proof_s_launches(tmp_path: Path) -> None:
    gpu = importlib.import_module("gate_quality_gpu")
    history = _history(
        tmp_path / "history.db",
        {1: (False, [99.0, 100.0, 101.0]), 2: (False, [109.0, 110.0, 111.0]),
         3: (True, [50.0, 50.0, 50.0])},  # a verdict's run (an injected slowdown): left out
    )  # fmt: skip
    noise = gpu.history_noise(history, "gpu")
    assert noise["output_tok_s"].between_sd == pytest.approx((10 / 2**0.5) / 105)
    assert noise["output_tok_s"].within_sd == pytest.approx(0.00955, abs=1e-4)
    assert noise["decode_tok_s"].between_sd == 0.0
    assert "2 launches of gpu (runs 1-2)" in noise["verify_ms"].source
    (setting, *_) = gpu.gpu_settings(noise)
    assert gpu.noise_of(setting)["output_tok_s"] == noise["output_tok_s"]
    assert gpu.main(["--history", str(tmp_path / "none.db")]) == 64
    assert gpu.main(["--history", str(history), "--scenario", "cpu"]) == 64


def test_each_launch_shows_the_sidecar_s_host_speed_beside_the_run_s_host_phases(
    tmp_path: Path,
) -> None:
    proof = importlib.import_module("gate_proof")
    loops = {"1": 1500.0, "2": 2900.0, "3": 1520.0}  # launch 2: the machine ran slow
    accept = {1: 0.21, 2: 0.45, 3: 0.22}
    lines = []
    for label, loop in loops.items():
        host = {"sidecar_loop_us": loop, "sidecar_loop_range_us": [loop - 10, loop + 40],
                "steal_share": 0.012, "anon_huge_pages_kb": 40960}  # fmt: skip
        seen = {"busiest_thread_cpus": [5], "nodes": {"0": 9}, "allowed_cpus": 16, **host}
        lines.append(json.dumps({"label": label, "spec": seen, "plain": seen}))
    (tmp_path / "placement.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "launch-runs.txt").write_text("1 1\n2 2\n3 3\n")
    db = tmp_path / "history.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE phases (run_id, mode, phase, repeat, mean_ms)")
        for run, ms in accept.items():
            for repeat in (0, 1):
                connection.executemany(
                    "INSERT INTO phases VALUES (?, ?, ?, ?, ?)",
                    [(run, "spec", "accept", repeat, ms), (run, "spec", "verify", repeat, 1.37),
                     (run, "spec", "prefill", repeat, 15 + 40 * ms),
                     (run, "plain", "accept", repeat, 9.0)],
                )  # fmt: skip
    text = "\n".join(
        proof._placement(tmp_path / "placement.jsonl", tmp_path / "launch-runs.txt", db)
    )
    assert "| 2 | 2 | [5], {'0': 9} (of 16) |" in text
    shown = "2900 (2890-2940), 1.2%, 40 MiB"
    assert f"| {shown} | {shown} | 33.000 / 0.450 / 1.370 |" in text
    # Prefill moves with accept here (15 + 40 x accept ms): both phases' correlations named.
    assert (
        "Across 3 launches the sidecar's loop and the spec server's host phases correlate: "
        "its accept r = +1.00 and its prefill r = +1.00." in text
    )


def test_the_sampler_times_the_machine_while_a_server_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placement = importlib.import_module("server_placement")
    # A process whose command line names the embedded server with a draft: a spec server.
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)",
         "perfgate.engines.embedded.server", "--speculative-algorithm"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30  # its command line shows once it has started
        while stand_in.pid not in placement.servers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert placement.servers().get(stand_in.pid) == "spec"
        # Other tests' servers may run beside this one: the sampler is shown the stand-in only.
        monkeypatch.setattr(placement, "servers", lambda: {stand_in.pid: "spec"})
        found = placement.sample(1.0, 0.1, None)
    finally:
        stand_in.kill()
        stand_in.wait()
    spec = found["spec"]
    low, high = spec["sidecar_loop_range_us"]
    assert 0 < low <= spec["sidecar_loop_us"] <= high
    assert spec["steal_share"] is None or 0 <= spec["steal_share"] <= 1
    if Path(f"/proc/{os.getpid()}/smaps_rollup").is_file():
        assert isinstance(spec["anon_huge_pages_kb"], int) and spec["anon_huge_pages_kb"] >= 0
    assert "plain" not in found


def test_a_series_goes_on_only_with_the_weights_it_was_launched_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first check records the weights' identities; the same weights pass after; other
    weights are refused (64) and the record kept; missing trained weights are 69, naming
    the command that trains them."""
    proof = importlib.import_module("gate_proof")
    state = tmp_path / "state"
    args = ["weights", "--config", str(REPO / "perfgate.toml"), "--state", str(state)]
    assert proof.main([*args, "--scenario", "embedded-default"]) == 0
    recorded = json.loads((state / "weights.json").read_text())
    assert recorded["model"].startswith("perfgate/llama-tiny@sha256:")
    assert recorded["draft"].startswith("perfgate/eagle3-llama-tiny@sha256:")
    assert proof.main([*args, "--scenario", "embedded-default"]) == 0  # the same: goes on
    assert "weights as the series'" in capsys.readouterr().out
    other = {**recorded, "draft": "perfgate/eagle3-llama-tiny@sha256:0123456789abcdef"}
    (state / "weights.json").write_text(json.dumps(other))
    assert proof.main([*args, "--scenario", "embedded-default"]) == 64
    said = capsys.readouterr().err
    assert "the series was launched with" in said and "give STATE another folder" in said
    assert json.loads((state / "weights.json").read_text()) == other  # kept as it was
    monkeypatch.setenv("PERFGATE_MODEL_CACHE", str(tmp_path / "empty-cache"))
    assert proof.main([*args[:-1], str(tmp_path / "s2"), "--scenario", "embedded-large-gpu"]) == 69
    assert "perfgate embedded train --size large" in capsys.readouterr().err
    assert not (tmp_path / "s2" / "weights.json").exists()


def test_a_call_refused_for_other_weights_launches_nothing_and_hands_its_state_back(
    tmp_path: Path,
) -> None:
    import tarfile

    state = tmp_path / "state"
    state.mkdir()
    (state / "weights.json").write_text(json.dumps({"model": "m@sha256:1", "draft": "d@sha256:2"}))
    (state / "site").mkdir()  # the installed wheels stay behind
    (state / "site" / "wheel.py").write_text("")
    done = proof_script(
        tmp_path, "as-placed", "launch", PYTHON=sys.executable, SCENARIO="embedded-default"
    )
    assert done.returncode == 64, done.stdout + done.stderr
    assert "the series was launched with m@sha256:1 and d@sha256:2" in done.stdout + done.stderr
    assert not (state / "launch-runs.txt").exists()  # nothing launched
    with tarfile.open(tmp_path / "out" / "state.tgz") as copied:
        names = copied.getnames()
    assert "./weights.json" in names and not any("site" in name for name in names)


def test_tolerances_derived_from_quiet_launches_are_the_default_and_wider_from_noisy_ones() -> None:
    """The GPU scenario sets verify and accept length and leaves tok/s, speedup and
    decode_tok_s to `baseline update`, which derives them from the approved launches: 3% from
    an H100's ten with prefill graphs (0.17% between launches) and from the ten without them
    (0.48%), wider from the H200's ten (2.63%), yet tighter than the 7% and 10% it shipped
    for that noise before."""
    gpu = importlib.import_module("gate_quality_gpu")
    for series in ("2026-12-06-h100-prefill-graphs", "2026-12-05-h100-series"):
        quiet = gpu.history_noise(
            REPO / "benchmarks/results/h200-gate-proof" / series / "history.db",
            "embedded-large-gpu",
        )
        assert gpu.derived(10, quiet) == {
            "accept_length": 0.01, "verify_ms": 0.01,
            "output_tok_s": 0.03, "speedup": 0.03, "decode_tok_s": 0.03,
        }  # fmt: skip
    wide = gpu.derived(10)
    assert 0.03 < wide["output_tok_s"] < gpu.CHOSEN["output_tok_s"]
    assert 0.03 < wide["speedup"] < gpu.CHOSEN["speedup"]
    assert gpu.shipped()[1] == ("output_tok_s", "speedup", "decode_tok_s")


def test_a_call_that_cannot_make_the_machine_s_launches_judges_no_verdict(tmp_path: Path) -> None:
    """Stage machine stopped by the call's time: the verdicts wait for the next call, since
    the pool, not this machine's own runs, would judge them."""
    from . import fake_smi

    state = tmp_path / "state"
    (state / "baselines").mkdir(parents=True)
    (state / "baselines" / "approved").touch()
    env = fake_smi.install(tmp_path / "smi", fake_smi.gpus(1))
    done = proof_script(
        tmp_path, "as-placed", "machine", "verdicts", PYTHON=sys.executable,
        SCENARIO="embedded-default", CALL_S="0", PATH=env["PATH"],
        FAKE_NVIDIA_SMI=env["FAKE_NVIDIA_SMI"], PERFGATE_GPU_READER=env["PERFGATE_GPU_READER"],
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "machine launch 1 of 3 may pass this call's 0 s: stopping; call again" in said
    assert "verdicts: this machine's own launches are not all made (stage machine)" in said
    assert not (state / "machine-runs.txt").exists() and not (state / "verdicts.jsonl").exists()


def test_a_machine_whose_launches_are_begun_judges_no_verdict_until_they_are_approved(
    tmp_path: Path,
) -> None:
    """A call of the verdicts alone, after one that began this machine's launches: the
    verdicts would be judged by the pool, not by the runs the machine's stage is making."""
    from perfgate.hardware import machine_id

    from . import fake_smi

    state = tmp_path / "state"
    (state / "baselines").mkdir(parents=True)
    (state / "baselines" / "approved").touch()
    listed = fake_smi.gpus(1)
    (state / "machine-runs.txt").write_text(f"{machine_id([listed[0]['uuid']])} 48\n")
    env = fake_smi.install(tmp_path / "smi", listed)
    done = proof_script(
        tmp_path, "as-placed", "verdicts", PYTHON=sys.executable, SCENARIO="embedded-default",
        PATH=env["PATH"], FAKE_NVIDIA_SMI=env["FAKE_NVIDIA_SMI"],
        PERFGATE_GPU_READER=env["PERFGATE_GPU_READER"],
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "verdicts: this machine's own launches are not all made (stage machine)" in said
    assert not (state / "verdicts.jsonl").exists()


def test_a_machine_s_approval_keeps_the_series_and_the_approved_machines_runs_only(
    tmp_path: Path,
) -> None:
    """The keep of a machine's approval counts the series, the launches of the machines
    approved before and this machine's: not those of a machine whose lease ended before its stage did,
    never approved (on a ninth H100 host, counting them asked for 22 runs, past the
    baseline's 20, and the approval was refused)."""
    from perfgate.hardware import machine_id

    from . import fake_smi

    state = tmp_path / "state"
    (state / "baselines").mkdir(parents=True)
    (state / "baselines" / "approved").touch()
    listed = fake_smi.gpus(1)
    here = machine_id([listed[0]["uuid"]])
    (state / "machine-gpus-done.approved").touch()
    runs = ["gpus-lost 11", *(f"gpus-done {i}" for i in (12, 13, 14))]
    runs += [f"{here} {i}" for i in (15, 16, 17)]  # this machine's three, all made
    (state / "machine-runs.txt").write_text("\n".join(runs) + "\n")
    env = fake_smi.install(tmp_path / "smi", listed)
    proof_script(
        tmp_path, "as-placed", "machine", PYTHON=sys.executable, SCENARIO="embedded-default",
        PATH=env["PATH"], FAKE_NVIDIA_SMI=env["FAKE_NVIDIA_SMI"],
        PERFGATE_GPU_READER=env["PERFGATE_GPU_READER"],
    )  # fmt: skip
    summary = (tmp_path / "out" / "summary.md").read_text()
    (approval,) = [line for line in summary.splitlines() if f"approve {here}'s 3 runs" in line]
    assert "--run 15 --run 16 --run 17" in approval
    assert "--keep 16 " in approval  # 10 of the series, 3 of gpus-done, 3 of this machine


def test_a_machine_the_baseline_has_no_room_for_is_refused_before_it_launches(
    tmp_path: Path,
) -> None:
    """The series' 10 launches and three approved machines' 3 each leave one of the
    baseline's 20 places: a fourth machine is told so before its launches, not at their
    approval, and judges no verdict (the pool would judge it)."""
    from perfgate.hardware import machine_id

    from . import fake_smi

    state = tmp_path / "state"
    (state / "baselines").mkdir(parents=True)
    (state / "baselines" / "approved").touch()
    runs = []
    for host in ("gpus-a", "gpus-b", "gpus-c"):
        (state / f"machine-{host}.approved").touch()
        runs += [f"{host} {i}" for i in range(3)]
    (state / "machine-runs.txt").write_text("\n".join(runs) + "\n")
    listed = fake_smi.gpus(1)
    env = fake_smi.install(tmp_path / "smi", listed)
    done = proof_script(
        tmp_path, "as-placed", "machine", "verdicts", PYTHON=sys.executable,
        SCENARIO="embedded-default", PATH=env["PATH"], FAKE_NVIDIA_SMI=env["FAKE_NVIDIA_SMI"],
        PERFGATE_GPU_READER=env["PERFGATE_GPU_READER"],
    )  # fmt: skip
    said = done.stdout + done.stderr
    here = machine_id([listed[0]["uuid"]])
    assert done.returncode == 1, said
    assert (
        "a baseline keeps at most 20 runs; the series' 10 and the approved machines' 9 leave "
        f"room for 1, not {here}'s 3: judge this machine in a series of its own"
    ) in " ".join(said.split())
    assert "verdicts: this machine's launches cannot join the series' baseline" in said
    assert (state / "machine-runs.txt").read_text().count(here) == 0  # nothing launched
    assert not (state / "verdicts.jsonl").exists()
