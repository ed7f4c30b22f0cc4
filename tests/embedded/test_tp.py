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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


@pytest.mark.parametrize("mode", ["spec", "plain"])
def test_tp2_over_gloo_gives_tp1s_outputs_on_the_default_prompts(mode: str, tmp_path: Path) -> None:
    prompts = list(load_prompt_set("default"))
    flags = SPEC if mode == "spec" else ()
    scored = list(b"Hello, world!")
    with _server(tmp_path / "tp1.log", *flags) as (client, _):
        tp1 = _outputs(client, prompts)
        tp1_scores = _scored(client, scored, 4)
    with _server(tmp_path / "tp2.log", "--tp-size", "2", *flags) as (client, _):
        info = client.get("/server_info").json()
        tp2 = _outputs(client, prompts)
        tp2_scores = _scored(client, scored, 4)
    assert info["tp_size"] == 2
    assert all(len(output) == GREEDY["max_new_tokens"] for output in tp1)
    assert tp2 == tp1
    # Teacher forcing runs on every rank too: the same tokens, logprobs within rounding.
    assert len(tp1_scores) == len(scored) - 4 + 3 * (len(scored) - 5)
    assert [token for token, _ in tp2_scores] == [token for token, _ in tp1_scores]
    assert [lp for _, lp in tp2_scores] == pytest.approx([lp for _, lp in tp1_scores], abs=1e-4)


def test_every_rank_writes_probe_records_that_carry_its_rank(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    env = probe_env(probe_dir, "embedded", mode="spec")
    with _server(tmp_path / "server.log", "--tp-size", "2", *SPEC, env=env) as (client, process):
        (rank1,) = _children(process.pid)
        started = time.time()
        _outputs(client, ["Hello, world!"])
        finished = time.time()
        wait_until_complete(probe_dir, finished)
    cycles = [r for r in read_records(probe_dir) if r.kind == "cycle"]
    assert {(r.rank, r.pid) for r in cycles} == {(0, process.pid), (1, rank1)}
    spread = rank_cycle_ms(cycles, started, finished)
    assert set(spread) == {"rank_cycle_ms.0", "rank_cycle_ms.1", "rank_cycle_ms.spread"}
    assert spread["rank_cycle_ms.spread"] >= 0.0


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name
)
def test_no_rank_process_outlives_the_server(sig: signal.Signals, tmp_path: Path) -> None:
    with _server(tmp_path / "server.log", "--tp-size", "2") as (client, process):
        ranks = _children(process.pid)
        assert len(ranks) == 1 and _alive(ranks[0])
        _outputs(client, ["Hello"])
        os.kill(process.pid, sig)  # the server alone, not its process group
        process.wait(timeout=GONE_TIMEOUT_S)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while _alive(ranks[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(ranks[0]), f"rank 1 (pid {ranks[0]}) outlived the server ({sig.name})"


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
