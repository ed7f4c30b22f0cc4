"""However the process that launched a server ends, no process of the server is left behind.

Twenty abrupt endings, four of each kind: SIGINT, SIGTERM and SIGKILL of a pytest process
that holds a running server; the server crashing while its launcher lives on; a startup
timeout. The server forks a child in its process group and a grandchild that leaves the group
(as a daemonising helper would): all three must be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 4
KINDS = ("sigint", "sigterm", "sigkill", "crash", "startup-timeout")

# A stand-in server: a child in its group, a grandchild in a session of its own.
SERVER = textwrap.dedent(
    """
    import http.server, os, subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    child = subprocess.Popen(sleeper)
    escaped = subprocess.Popen(sleeper, start_new_session=True)
    with open(sys.argv[2] + ".tmp", "w") as out:
        out.write(f"{os.getpid()} {child.pid} {escaped.pid}")
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    if sys.argv[3] == "hang":
        time.sleep(600)
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
    """
)

# The launcher: a test in a pytest process of its own that keeps a server up until stopped.
LAUNCHER_TEST = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from perfgate.engines.commands import ServerCommand
    from perfgate.engines.launch import free_port, running_server

    def test_hold_a_server():
        port = free_port()
        argv = (sys.executable, os.environ["STAND_IN"], str(port), os.environ["PIDS"],
                os.environ["SERVER_MODE"])
        command = ServerCommand("tiny", "embedded", "spec", argv, {}, "127.0.0.1", port)
        timeout = float(os.environ["STARTUP_TIMEOUT_S"])
        with running_server(command, Path(os.environ["LOG"]), timeout):
            Path(os.environ["READY"]).write_text("up")
            time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait_for(path: Path, launcher: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if launcher.poll() is not None:
            raise AssertionError(f"the launcher ended early ({launcher.returncode})")
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.05)


def _start_launcher(tmp_path: Path, server_mode: str, timeout_s: float) -> subprocess.Popen[bytes]:
    (tmp_path / "stand_in.py").write_text(SERVER)
    (tmp_path / "test_launcher.py").write_text(LAUNCHER_TEST)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "STAND_IN": str(tmp_path / "stand_in.py"),
        "PIDS": str(tmp_path / "pids"),
        "READY": str(tmp_path / "ready"),
        "LOG": str(tmp_path / "server.log"),
        "SERVER_MODE": server_mode,
        "STARTUP_TIMEOUT_S": str(timeout_s),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    return subprocess.Popen(
        [*command, str(tmp_path / "test_launcher.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _end_abruptly(kind: str, tmp_path: Path) -> tuple[list[int], subprocess.Popen[bytes]]:
    """End the launcher (or the server) the way `kind` says; return the server's pids."""
    hang = kind == "startup-timeout"
    launcher = _start_launcher(tmp_path, "hang" if hang else "ok", timeout_s=2 if hang else 60)
    _wait_for(tmp_path / "pids", launcher)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    if not hang:
        _wait_for(tmp_path / "ready", launcher)
    if kind in ("sigint", "sigterm", "sigkill"):
        launcher.send_signal(getattr(signal, kind.upper()))
    elif kind == "crash":
        os.kill(pids[0], signal.SIGKILL)  # the server dies; its launcher lives on
    return pids, launcher


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("kind", KINDS)
def test_no_server_process_outlives_an_abrupt_ending(
    kind: str, round_: int, tmp_path: Path
) -> None:
    pids, launcher = _end_abruptly(kind, tmp_path)
    try:
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in pids if _alive(p)]
        assert not left, f"{kind}: left behind {left} of server, child, escaped grandchild {pids}"
    finally:
        launcher.kill()
        launcher.wait()
        for pid in pids:  # never leave them to the next test, even when this one failed
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
