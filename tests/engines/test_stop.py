"""A server's end, as the launcher sees it: `stop` returns once every process of the server has
exited, signals only what is still the server's, and a server that ends while perfgate uses
it is reported with its own last word (a rank that failed), its GPUs' memory included.

Stand-in servers (a few lines of Python) keep these tests cheap; the embedded engine's own
ranks are tested in tests/embedded/test_tp_failures.py.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfgate.engines import launch
from perfgate.engines.client import EngineClient
from perfgate.engines.gpu_memory import query_gpus
from perfgate.engines.launch import SERVER_MARKER, free_port, running_server, start_server
from perfgate.engines.processes import iter_processes, read_process
from perfgate.engines.server_commands import ServerCommand
from perfgate.errors import InfrastructureError

from .conftest import SetGpus

# A child that left the server's process group (its own session) and ignores SIGTERM: what a
# careless engine's helper process looks like. On `POST /generate` the server says why it ends
# as the embedded engine's rank 0 does when a rank fails (another rank's traceback after it),
# or dies of SIGKILL, as asked.
SERVER = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True)
    open(sys.argv[2], "w").write(str(child.pid))
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def do_POST(self):
            if sys.argv[3] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            print("[rank 1] Traceback (most recent call last):", file=sys.stderr)
            print("[rank 1] RuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
            print("error: rank 1 of 2 (pid 4242) exited with code 1 after start-up, so the "
                  "server ends (exit code 69)", file=sys.stderr)
            print("rank 1's last lines:", file=sys.stderr)
            print("  [rank 1] RuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
            for _ in range(30):  # another rank's traceback, relayed after: its collective broke
                print("[rank 2]   File 'parallel.py', in all_reduce", file=sys.stderr)
            sys.stderr.flush()
            os._exit(69)
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    """
)


def _command(tmp_path: Path, on_request: str = "fail") -> tuple[ServerCommand, Path]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    child = tmp_path / "child"
    port = free_port()
    argv = (sys.executable, str(script), str(port), str(child), on_request, "--tp-size", "2")
    return ServerCommand("tiny", "embedded", "spec", argv, {}, "127.0.0.1", port), child


def _running(pid: int) -> bool:
    found = read_process(pid)
    return found is not None and found.alive


def _marked(tag: str | None) -> list[int]:
    return [p.pid for p in iter_processes() if (p.environ or {}).get(SERVER_MARKER) == tag]


@pytest.fixture
def short_crash_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor waits 0.2 s, not its 2 s, before it SIGKILLs the stubborn child a crashed
    server left behind: the same SIGTERM-then-SIGKILL sweep, without the idle seconds."""
    real = launch.supervised_argv

    def argv(command: ServerCommand, lifeline: int) -> list[str]:
        found = real(command, lifeline)
        server_at = found.index("--")
        return [*found[:server_at], "--grace-s", "0.2", *found[server_at:]]

    monkeypatch.setattr(launch, "supervised_argv", argv)


def _kill_supervisor(server: launch.Server) -> None:
    """What the out-of-memory killer may do: the supervisor dies, the server lives on."""
    os.kill(server.process.pid, signal.SIGKILL)
    server.wait_exit(10)


def test_stop_returns_once_a_process_that_left_the_group_has_exited(tmp_path: Path) -> None:
    command, child_file = _command(tmp_path)
    server = start_server(command, tmp_path / "log", startup_timeout_s=30)
    child = int(child_file.read_text())
    try:
        _kill_supervisor(server)  # nobody is left to sweep what left the group
        server.stop(grace_s=2)
        assert not _running(child), "stop returned while a process of the server still ran"
        assert _marked(server.tag) == []
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)


def test_the_group_is_not_signalled_once_its_leader_is_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, child_file = _command(tmp_path)
    server = start_server(command, tmp_path / "log", startup_timeout_s=30)
    child = int(child_file.read_text())
    signalled: list[int] = []
    real_killpg = os.killpg
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: signalled.append(pgid))
    try:
        _kill_supervisor(server)
        server.process.wait()  # reaped: its pid, the group's id, may name any group now
        server.stop(grace_s=2)
        assert signalled == [], "a group id that may no longer be the server's was signalled"
        assert _marked(server.tag) == [], "the server's processes are still found by its marker"
    finally:
        monkeypatch.setattr(os, "killpg", real_killpg)
        for pid in (child, *_marked(server.tag)):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.usefixtures("short_crash_grace")
def test_a_server_that_ends_while_used_is_reported_with_its_last_word(tmp_path: Path) -> None:
    command, _ = _command(tmp_path)
    started = time.monotonic()
    with (
        pytest.raises(InfrastructureError) as caught,
        running_server(command, tmp_path / "log", 30) as server,
        EngineClient(server.base_url, 30) as client,
    ):
        tag = server.tag
        client.generate(["Hello"], 4)
    message = str(caught.value)
    assert message.startswith("the spec server of scenario 'tiny' ended while perfgate used it: ")
    assert "rank 1 of 2 (pid 4242) exited with code 1 after start-up" in message
    assert "[rank 1] RuntimeError: CUDA error: an illegal memory access" in caught.value.detail
    assert "the request that failed: POST " in caught.value.detail
    assert time.monotonic() - started < 10
    assert _marked(tag) == []


@pytest.mark.usefixtures("short_crash_grace")
def test_a_server_killed_by_a_signal_is_named_as_rank_0(tmp_path: Path) -> None:
    command, _ = _command(tmp_path, "kill")
    with (
        pytest.raises(InfrastructureError) as caught,
        running_server(command, tmp_path / "log", 30) as server,
        EngineClient(server.base_url, 30) as client,
    ):
        client.generate(["Hello"], 4)
    assert "the server (rank 0 of 2, pid " in str(caught.value)
    assert "was killed by SIGKILL (signal 9)" in str(caught.value)


@pytest.mark.usefixtures("short_crash_grace")
def test_gpu_memory_a_failed_server_still_holds_is_named_in_the_error(
    tmp_path: Path, fake_gpus: SetGpus
) -> None:
    command, _ = _command(tmp_path)
    gpus = (query_gpus() or [])[:2]
    # GPU 0 never frees its memory here: waiting for it would only delay the same error (the
    # wait's polling is tested in test_gpu_memory.py).
    with (
        pytest.raises(InfrastructureError) as caught,
        running_server(command, tmp_path / "log", 30, gpus=gpus, release_timeout_s=0) as server,
        EngineClient(server.base_url, 30) as client,
    ):
        fake_gpus(8, used_mib=[30000.0, 500.0, *[500.0] * 6])  # GPU 0 stays held after it
        client.generate(["Hello"], 4)
    message = str(caught.value)
    assert "rank 1 of 2 (pid 4242) exited with code 1 after start-up" in message
    assert "also: the GPU memory of the spec server of scenario 'tiny' was not released" in message
    assert "GPU 0 still uses 29.3 GiB (0.5 GiB before it started)" in message
    assert "GPU 1" not in message


def test_the_supervisor_signals_a_pid_only_while_it_names_the_process_it_found() -> None:
    import subprocess

    from perfgate.engines import supervise

    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        try:
            (row,) = [r for r in supervise._processes() if r[0] == sleeper.pid]
            # What the supervisor found under this pid ended, and the kernel gave the pid to
            # another process: its start time differs.
            supervise._send((*row[:4], row[4] - 1), signal.SIGKILL)
            time.sleep(0.2)
            assert sleeper.poll() is None, "a process that was not the one found was signalled"
            supervise._send(row, signal.SIGKILL)
            assert sleeper.wait(timeout=10) == -signal.SIGKILL
        finally:
            sleeper.kill()
