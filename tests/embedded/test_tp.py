"""Tensor parallelism on the CPU: a --tp-size 2 server as two processes over gloo.

Its outputs are TP1's, its probe records carry their rank, and however the server ends, no
rank process outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from perfgate.engines.launch import free_port
from perfgate.probe import probe_env
from perfgate.probe.reader import rank_cycle_ms, read_records, wait_until_complete
from perfgate.prompts import load_prompt_set

from ..hang import HANG_S
from .common import DRAFT, SERVER_MODULE, TARGET, server_env, wait_healthy

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 90.0
GONE_TIMEOUT_S = 15.0
GREEDY = {"temperature": 0, "max_new_tokens": 12}
SPEC = (
    *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT),
    *("--speculative-num-steps", "3", "--speculative-eagle-topk", "1"),
    *("--speculative-num-draft-tokens", "4"),
)


@contextmanager
def _server(
    log: Path, *flags: str, env: dict[str, str] | None = None
) -> Iterator[tuple[httpx.Client, subprocess.Popen[bytes]]]:
    """Start a CPU server with flags; yield a client and the process; stop it (SIGTERM)."""
    port = free_port()
    command = [sys.executable, "-m", SERVER_MODULE, "--model-path", TARGET, "--port", str(port)]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--num-threads", "1", *flags],
            stderr=stderr,
            env={**server_env(), **(env or {})},
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=HANG_S) as client:
            wait_healthy(client, process, log, START_TIMEOUT_S)
            yield client, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _outputs(client: httpx.Client, prompts: list[str]) -> list[list[int]]:
    response = client.post("/generate", json={"text": prompts, "sampling_params": GREEDY})
    assert response.status_code == 200, response.text
    return [item["output_ids"] for item in response.json()]


def _children(pid: int) -> list[int]:
    """The live processes whose parent is pid, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _state_and_parent(int(entry.name))[1] == pid:
            found.append(int(entry.name))
    return found


def _state_and_parent(pid: int) -> tuple[str, int]:
    """The process's state letter and parent pid; ("", 0) once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", 0
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return state, int(ppid)


def _alive(pid: int) -> bool:
    state, _ = _state_and_parent(pid)
    return state not in ("", "Z", "X")  # a zombie holds nothing but its exit status


def _scored(client: httpx.Client, ids: list[int], start: int) -> list[tuple[int, float]]:
    """Teacher forcing, as the equivalence rule asks it: (token id, logprob) of each scored
    token, then of each position's top tokens."""
    body = {
        "input_ids": ids,
        "return_logprob": True,
        "top_logprobs_num": 3,
        "logprob_start_len": start,
        "sampling_params": {"temperature": 0, "max_new_tokens": 1},
    }
    response = client.post("/generate", json=body)
    assert response.status_code == 200, response.text
    meta = response.json()["meta_info"]
    pairs = [(entry[1], entry[0] or 0.0) for entry in meta["input_token_logprobs"]]
    tops = [entry for position in meta["input_top_logprobs"] if position for entry in position]
    return pairs + [(entry[1], entry[0]) for entry in tops]


# A TP2 server of each mode serves every check that can read it: its outputs against a TP1
# server's, its probe records (spec) and, last, its end by a signal, which no rank may outlive.
# Each launch is two processes that import torch, so the tests share them (SIGKILL, which
# leaves no server to read, gets one of its own).
ENDED_BY = {"spec": signal.SIGINT, "plain": signal.SIGTERM}
SCORED = list(b"Hello, world!")


@dataclass(frozen=True)
class Ending:
    """A TP2 server's rank processes once it answered /health, and those still running
    GONE_TIMEOUT_S after a signal ended the server."""

    ranks: list[int]
    alive: bool  # every rank was running while the server served
    outlived: list[int]


@dataclass(frozen=True)
class Served:
    """What a TP1 and a TP2 server of one mode answered, one after the other, and how the TP2
    server ended (by ENDED_BY[mode])."""

    tp1: list[list[int]]
    tp1_scores: list[tuple[int, float]]
    tp2: list[list[int]]
    tp2_scores: list[tuple[int, float]]
    info: dict[str, Any]
    pid: int  # the TP2 server's, rank 0
    probe_dir: Path  # its probe's records (spec)
    probed: tuple[float, float]  # when its request of "Hello, world!" was sent and answered
    ending: Ending


def _serve(mode: str, folder: Path) -> Served:
    prompts = list(load_prompt_set("default"))
    flags = SPEC if mode == "spec" else ()
    with _server(folder / "tp1.log", *flags) as (client, _):
        tp1 = _outputs(client, prompts)
        tp1_scores = _scored(client, SCORED, 4)
    probe_dir = folder / "probe"
    env = probe_env(probe_dir, "embedded", mode="spec") if mode == "spec" else None
    with _server(folder / "tp2.log", "--tp-size", "2", *flags, env=env) as (client, process):
        ranks = _children(process.pid)
        alive = all(_alive(pid) for pid in ranks)
        info = client.get("/server_info").json()
        tp2 = _outputs(client, prompts)
        tp2_scores = _scored(client, SCORED, 4)
        started = time.time()
        _outputs(client, ["Hello, world!"])
        finished = time.time()
        if mode == "spec":
            wait_until_complete(probe_dir, finished)
        ending = Ending(ranks, alive, _end(process, ENDED_BY[mode], ranks))
    return Served(
        tp1, tp1_scores, tp2, tp2_scores, info, process.pid, probe_dir, (started, finished), ending
    )


def _end(process: subprocess.Popen[bytes], sig: signal.Signals, ranks: list[int]) -> list[int]:
    """Send sig to the server alone, not its process group; return the ranks still running
    GONE_TIMEOUT_S after it ended."""
    os.kill(process.pid, sig)
    process.wait(timeout=GONE_TIMEOUT_S)
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in ranks if _alive(pid)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Served]:
    """Each mode's servers, run on the first test that asks and read by those after it."""
    runs: dict[str, Served] = {}

    def run(mode: str) -> Served:
        if mode not in runs:
            runs[mode] = _serve(mode, tmp_path_factory.mktemp(f"tp-{mode}"))
        return runs[mode]

    return run


@pytest.mark.parametrize("mode", ["spec", "plain"])
def test_tp2_over_gloo_gives_tp1s_outputs_on_the_default_prompts(
    mode: str, served: Callable[[str], Served]
) -> None:
    run = served(mode)
    assert run.info["tp_size"] == 2
    assert all(len(output) == GREEDY["max_new_tokens"] for output in run.tp1)
    assert run.tp2 == run.tp1
    # Teacher forcing runs on every rank too: the same tokens, logprobs within rounding.
    assert len(run.tp1_scores) == len(SCORED) - 4 + 3 * (len(SCORED) - 5)
    assert [token for token, _ in run.tp2_scores] == [token for token, _ in run.tp1_scores]
    assert [lp for _, lp in run.tp2_scores] == pytest.approx(
        [lp for _, lp in run.tp1_scores], abs=1e-4
    )


def test_every_rank_writes_probe_records_that_carry_its_rank(
    served: Callable[[str], Served],
) -> None:
    run = served("spec")
    (rank1,) = run.ending.ranks
    cycles = [r for r in read_records(run.probe_dir) if r.kind == "cycle"]
    assert {(r.rank, r.pid) for r in cycles} == {(0, run.pid), (1, rank1)}
    spread = rank_cycle_ms(cycles, *run.probed)
    assert set(spread) == {"rank_cycle_ms.0", "rank_cycle_ms.1", "rank_cycle_ms.spread"}
    assert spread["rank_cycle_ms.spread"] >= 0.0


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name
)
def test_no_rank_process_outlives_the_server(
    sig: signal.Signals, served: Callable[[str], Served], tmp_path: Path
) -> None:
    modes = [mode for mode, ended_by in ENDED_BY.items() if ended_by == sig]
    if modes:  # the end of that mode's shared TP2 server
        ending = served(modes[0]).ending
    else:
        with _server(tmp_path / "server.log", "--tp-size", "2") as (client, process):
            ranks = _children(process.pid)
            alive = all(_alive(pid) for pid in ranks)
            _outputs(client, ["Hello"])
            ending = Ending(ranks, alive, _end(process, sig, ranks))
    assert len(ending.ranks) == 1 and ending.alive
    assert ending.outlived == [], f"rank 1 (pid {ending.ranks[0]}) outlived the server ({sig.name})"


def test_a_rank_that_cannot_start_ends_the_server_with_exit_69(tmp_path: Path) -> None:
    script = (
        "import time\n"
        "from perfgate.engines.embedded.ranks import RankProcesses\n"
        "RankProcesses(['--model-path', 'perfgate/llama-tiny', '--no-such-flag'], 2, 1)\n"
        "time.sleep(60)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=server_env(),
    )
    assert done.returncode == 69, done.stderr
    assert "unrecognized arguments: --no-such-flag" in done.stderr  # rank 1's own words
    assert "error: rank 1 of 2 (pid " in done.stderr
    assert "exited with code 64 while the server was starting" in done.stderr
    assert "[rank 1] " in done.stderr  # its lines, marked with its rank
