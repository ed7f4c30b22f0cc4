"""However the process that launched a server ends, no process of the server is left behind.

Twenty abrupt endings of the embedded server, four of each kind: SIGINT, SIGTERM and SIGKILL
of the pytest process that holds it running; the server crashing while its launcher lives on;
a startup timeout. Then the same five endings with a stand-in server that, as SGLang does,
spawns processes of its own: one in its process group, one that leaves it.

Every process of a server carries a marker in its environment (the launcher puts it there and
children inherit it); afterwards no process on the machine may carry it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from ..hang import HANG_S

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 4
KINDS = ("sigint", "sigterm", "sigkill", "crash", "startup-timeout")
MARK = "PERFGATE_TEARDOWN_MARK"

# A stand-in server: a child in its group, a grandchild in a session of its own.
STAND_IN = textwrap.dedent(
    """
    import http.server, subprocess, sys, time
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    subprocess.Popen(sleeper)
    subprocess.Popen(sleeper, start_new_session=True)
    if sys.argv[2] == "hang":
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
    from perfgate.engines.server_commands import ServerCommand
    from perfgate.engines.launch import free_port, running_server

    def test_hold_a_server():
        port = free_port()
        if os.environ["SERVER"] == "embedded":
            argv = (sys.executable, "-m", "perfgate.engines.embedded.server", "--model-path",
                    "perfgate/llama-tiny", "--device", "cpu", "--port", str(port))
        else:
            argv = (sys.executable, os.environ["SERVER"], str(port), os.environ["SERVER_MODE"])
        env = {os.environ["MARK_NAME"]: os.environ["MARK_VALUE"]}
        command = ServerCommand("tiny", "embedded", "spec", argv, env, "127.0.0.1", port)
        timeout = float(os.environ["STARTUP_TIMEOUT_S"])
        with running_server(command, Path(os.environ["LOG"]), timeout) as server:
            Path(os.environ["READY"]).write_text(str(server.process.pid))
            time.sleep(600)
    """
)


def marked_processes(mark: str) -> list[int]:
    """Living processes whose environment carries `MARK=mark`."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0") and not _zombie(environ.parent):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def _zombie(proc: Path) -> bool:
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _launch(tmp_path: Path, server: str, mark: str, hang: bool) -> subprocess.Popen[bytes]:
    (tmp_path / "test_launcher.py").write_text(LAUNCHER_TEST)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SERVER": server,
        "SERVER_MODE": "hang" if hang else "ok",
        "MARK_NAME": MARK,
        "MARK_VALUE": mark,
        "READY": str(tmp_path / "ready"),
        "LOG": str(tmp_path / "server.log"),
        "STARTUP_TIMEOUT_S": "0.5" if hang else "60",
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.Popen(
        [*command, str(tmp_path / "test_launcher.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait(
    condition: object, launcher: subprocess.Popen[bytes], what: str, timeout_s: float = HANG_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if launcher.poll() is not None:
            raise AssertionError(f"the launcher ended ({launcher.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def end_abruptly(kind: str, tmp_path: Path, server: str) -> None:
    """Start a server through a pytest launcher, end it the way `kind` says, and check that
    none of the server's processes outlives the ending."""
    mark = uuid.uuid4().hex
    hang = kind == "startup-timeout"
    launcher = _launch(tmp_path, server, mark, hang)
    try:
        _wait(lambda: marked_processes(mark), launcher, "the server started")
        if not hang:
            # Written by another process: wait for its content, not only for the file.
            _wait(lambda: _read(tmp_path / "ready").strip(), launcher, "the server was healthy")
        if kind in ("sigint", "sigterm", "sigkill"):
            launcher.send_signal(getattr(signal, kind.upper()))
        elif kind == "crash":
            supervisor = int((tmp_path / "ready").read_text())
            (server_pid,) = [p for p in marked_processes(mark) if _parent(p) == supervisor]
            os.kill(server_pid, signal.SIGKILL)  # the server dies; its launcher lives on
        deadline = time.monotonic() + 30
        while marked_processes(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not marked_processes(mark), f"{kind}: server processes left behind"
    finally:
        launcher.kill()
        launcher.wait()
        for pid in marked_processes(mark):  # never leave them to the next test
            os.kill(pid, signal.SIGKILL)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("kind", KINDS)
def test_no_embedded_server_outlives_an_abrupt_ending(
    kind: str, round_: int, tmp_path: Path
) -> None:
    end_abruptly(kind, tmp_path, "embedded")


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_processes_a_server_spawns_are_ended_too(kind: str, tmp_path: Path) -> None:
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    end_abruptly(kind, tmp_path, str(tmp_path / "stand_in.py"))
