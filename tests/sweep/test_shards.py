"""A sweep shared by shards: the assignment, and shard processes against a real PostgreSQL.

The shard processes are the real `perfgate sweep` command (tests/sweep/shard_worker.py), its
servers the sweep tests' stand-in whose tok/s are a function of the point, so the best point
is known; what is real is what sharding is about: the processes, the one PostgreSQL history
they record to at once, a shard killed in the middle of a point, and the collect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.errors import ConfigError, ExitCode
from perfgate.store import close_history, list_runs, open_history
from perfgate.sweep.collected import render_collected
from perfgate.sweep.grid import SweepSpec
from perfgate.sweep.run import SweepRunner
from perfgate.sweep.shards import (
    SWEEP_RUN,
    Shard,
    collect,
    numbered_points,
    parse_shard,
    run_entry,
)

from ..conftest import write_config
from ..factories import measurement, record
from ..hang import HANG_S
from ..in_process import perfgate_main
from ..store.postgres import (
    PostgresServer,
    fresh_database,
)
from .shard_worker import stand_in_init

WORKER = Path(__file__).resolve().parent / "shard_worker.py"
SPEC = SweepSpec("s", "tiny", steps=(1, 2, 3, 4, 5, 6), env={"NCCL_PROTO": ("LL", "Simple")})
GRID = ["--scenario", "tiny", "--name", "steps", "--steps", "1-6", "--env", "NCCL_PROTO=LL,Simple"]
UNSET = ("PERFGATE_", "GITHUB_")  # the shards' environment: neither a history nor a CI run


def test_the_shards_share_the_grid_round_robin_and_stably() -> None:
    numbered = numbered_points(SPEC)
    assert len(numbered) == 12 and numbered == numbered_points(SPEC)
    shares = [[k for k in range(12) if Shard(i, 5).holds(k)] for i in range(1, 6)]
    assert shares[0] == [0, 5, 10] and shares[4] == [4, 9]
    assert sorted(k for share in shares for k in share) == list(range(12))  # each point once
    # The grid's order: the environment points, then steps ascending.
    assert [(p.env, p.steps) for p in numbered[:2]] == [((("NCCL_PROTO", "LL"),), 1)] * 1 + [
        ((("NCCL_PROTO", "LL"),), 2)
    ]


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/1001", "-1/2"])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--shard"):
        parse_shard(text)
    assert parse_shard(" 2/ 3") == Shard(2, 3)


def _argv(project: Path, url: str, *flags: str) -> list[str]:
    return ["sweep", "--config", str(project / "perfgate.toml"), "--db", url, *GRID, *flags]


def _start(project: Path, url: str, *flags: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(UNSET)}
    with (project / f"out-{time.monotonic_ns()}.txt").open("wb") as output:
        return subprocess.Popen(
            [sys.executable, str(WORKER), *_argv(project, url, *flags)],
            cwd=project,
            env={**environ, **(env or {})},
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _sweep_here(project: Path, url: str, *flags: str) -> None:
    """The sweep `_start` runs, run in this process to its end (exit 0), the stand-in as its
    servers: for the sweeps no test kills, a process would only add a start of Python and
    perfgate's imports."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SweepRunner, "__init__", stand_in_init())
        for name in [name for name in os.environ if name.startswith(UNSET)]:
            patch.delenv(name)
        done = perfgate_main(*_argv(project, url, *flags), cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr


def _collect(project: Path, url: str, batch: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    out = project / f"collect-{batch}.json"
    done = perfgate_main(
        "sweep", "--collect", "steps", "--batch", batch, "--db", url, "--json", str(out),
        cwd=project,
    )  # fmt: skip
    return done.returncode, json.loads(out.read_text()), done.stdout


def _points(document: dict) -> list[tuple]:  # type: ignore[type-arg]
    return [(p["steps"], p["env"]["NCCL_PROTO"], p["output_tok_s"]) for p in document["points"]]


@pytest.mark.slow
def test_shards_against_one_postgresql_history_collect_to_the_unsharded_sweep(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    write_config(tmp_path)
    marker = tmp_path / "hanging"
    with fresh_database(postgres_server) as url:
        hang = {"HANG_AT": "steps=3 NCCL_PROTO=Simple", "HANG_MARKER": str(marker)}
        shards = [
            _start(tmp_path, url, "--shard", f"{i}/3", "--batch", "b1", env=hang if i == 3 else None)
            for i in (1, 2, 3)
        ]  # fmt: skip
        _sweep_here(tmp_path, url, "--batch", "whole")  # while the shards record to the history
        assert [p.wait(timeout=HANG_S) for p in shards[:2]] == [0, 0]
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert shards[2].poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        shards[2].send_signal(signal.SIGKILL)  # killed outright in the middle of a point
        shards[2].wait(timeout=30)

        # Shard 3/3 holds points 2, 5, 8, 11: LL steps 3 and 6 recorded, Simple steps 3 hung.
        code, broken, text = _collect(tmp_path, url, "b1")
        assert code == ExitCode.INFRASTRUCTURE, text
        assert broken["missing"] == [
            "steps=3 topk=1 draft_tokens=4 NCCL_PROTO=Simple",
            "steps=6 topk=1 draft_tokens=7 NCCL_PROTO=Simple",
        ]
        assert "Missing: shard 3/3 recorded 2 of its 4 points; missing: steps=3" in text
        assert "skipped: missing: shard 3/3 recorded no run of it" in text
        runs = [r for r in _runs(url) if r.measurement.config[SWEEP_RUN]["batch"] == "b1"]
        assert not any(r.measurement.config[SWEEP_RUN]["point"] == 8 for r in runs)
        killed = [r for r in runs if r.measurement.config[SWEEP_RUN]["shard"] == 3]
        assert len(killed) == 2 and all(r.measurement.spec.samples["output_tok_s"] for r in killed)

        # Shard 3 again fills the batch: the same points and best as the unsharded sweep.
        _sweep_here(tmp_path, url, "--shard", "3/3", "--batch", "b1")
        code, sharded, text = _collect(tmp_path, url, "b1")
        assert code == ExitCode.PASS, text
        code, unsharded, _ = _collect(tmp_path, url, "whole")
        assert code == ExitCode.PASS
        assert _points(sharded) == _points(unsharded) and len(_points(sharded)) == 12
        best = (sharded["best"]["steps"], sharded["best"]["env"], sharded["best"]["output_tok_s"])
        assert best == (3, {"NCCL_PROTO": "LL"}, 140.0)
        assert (unsharded["best"]["steps"], unsharded["best"]["env"]) == (3, {"NCCL_PROTO": "LL"})
        assert "Best: steps=3 topk=1 draft_tokens=4 NCCL_PROTO=LL: 140.0 tok/s" in text


def test_points_of_machines_that_differ_are_not_compared() -> None:
    """Shard 2's runner has another torch: its points are no match for shard 1's."""
    records = []
    for number, point in enumerate(numbered_points(SPEC)):
        shard = Shard(number % 2 + 1, 2)
        m = measurement("s", spec_tok_s=100.0 + number)
        fingerprint = {**m.fingerprint, "scenario": f"digest-{point.steps}"}
        fingerprint |= {"env.NCCL_PROTO": dict(point.env)["NCCL_PROTO"]}  # varied: no matter
        if shard.index == 2:
            fingerprint["torch"] = "9.9.9"
        entry = run_entry("b2", shard, number, 12, SPEC, "tiny")
        config = {**m.config, "sweep": "s", SWEEP_RUN: entry}
        m = replace(m, fingerprint=fingerprint, config=config)
        records.append(replace(record(m), id=number + 1))
    markdown, document, code = render_collected(collect("s", "b2", records))
    assert code == ExitCode.BAD_INPUT, markdown
    assert document["best"] is None and document["incomparable"]
    assert "Best: none across the batch" in markdown
    assert "points 1, 3, 5, 7, 9, 11 differ from points 0, 2, 4, 6, 8, 10: torch (" in markdown
    assert "vs 9.9.9)" in markdown and "env.NCCL_PROTO" not in markdown
    assert "Group 1 (6 points): Best: steps=5 topk=1 draft_tokens=6 NCCL_PROTO=Simple" in markdown


def test_a_sharded_sweep_outside_github_actions_needs_a_batch(tmp_path: Path) -> None:
    write_config(tmp_path)
    done = perfgate_main("sweep", *GRID, "--shard", "1/2", cwd=tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT
    assert "--batch: the shards of a sweep must share a batch" in done.stderr
    missing = perfgate_main("sweep", "--collect", "nothing", cwd=tmp_path)
    assert missing.returncode == ExitCode.BAD_INPUT


def _runs(url: str) -> list:  # type: ignore[type-arg]
    sessions = open_history(url)
    try:
        with sessions() as session:
            return list_runs(session)
    finally:
        close_history(sessions)
