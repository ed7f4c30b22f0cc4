"""Start a server in its own process group, wait for it to be healthy, stop it on every path."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from perfgate.engines.commands import ServerCommand
from perfgate.errors import ConfigError, ExitCode, InfrastructureError

LOG_TAIL_LINES = 20


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Server:
    """A running server process and where its log goes."""

    def __init__(self, command: ServerCommand, process: subprocess.Popen[bytes], log_path: Path):
        self.command = command
        self.process = process
        self.log_path = log_path

    @property
    def base_url(self) -> str:
        return self.command.base_url

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """Return the last lines of the server's log."""
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> int | None:
        """End the whole process group: SIGTERM, then SIGKILL after `grace_s`."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace_s)
        # Children of the server (schedulers, TP ranks) may outlive it: end the group regardless.
        _signal_group(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        return self.process.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def start_server(command: ServerCommand, log_path: Path, startup_timeout_s: float) -> Server:
    """Launch `command`, wait until `/health` answers, and return the running server."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **command.env}
    with log_path.open("wb") as log:
        log.write(f"$ {command.shell()}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                command.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so teardown reaches children
            )
        except OSError as error:
            raise InfrastructureError(
                f"cannot start the {command.mode} server of scenario {command.scenario!r}: "
                f"{command.argv[0]}: {error.strerror}"
            ) from None
    server = Server(command, process, log_path)
    try:
        _wait_healthy(server, startup_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_server(
    command: ServerCommand, log_path: Path, startup_timeout_s: float
) -> Iterator[Server]:
    """Run a server for the duration of a `with` block; it is stopped however the block ends."""
    server = start_server(command, log_path, startup_timeout_s)
    try:
        yield server
    finally:
        server.stop()


def _wait_healthy(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    url = server.base_url + "/health"
    with httpx.Client(timeout=2.0) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise _exited_error(server, code)
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"the {server.command.mode} server of scenario {server.command.scenario!r} "
                    f"was not healthy after {timeout_s:.0f} s (log: {server.log_path}); "
                    "if it is only slow, raise the scenario's startup_timeout_s",
                    detail=server.log_tail(),
                )
            time.sleep(0.1)


def _exited_error(server: Server, code: int) -> ConfigError | InfrastructureError:
    where = f"the {server.command.mode} server of scenario {server.command.scenario!r}"
    if code == ExitCode.BAD_INPUT:
        # The server refused its arguments: a configuration mistake, not a machine failure.
        error = ConfigError(
            f"{where} refused its arguments: {server.log_tail(1)}",
            fix=f"fix the scenario (full log: {server.log_path})",
        )
        error.detail = server.log_tail()
        return error
    return InfrastructureError(
        f"{where} exited with code {code} before it was healthy; "
        f"read its log {server.log_path} and fix the cause",
        detail=server.log_tail(),
    )
