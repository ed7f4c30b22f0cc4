"""Start a server in its own process group, wait for it to be healthy, stop it on every path."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

import httpx

from perfgate.config import Scenario
from perfgate.devices import Gpu
from perfgate.engines import processes, supervise
from perfgate.engines.client import RequestRefused, tls_context
from perfgate.engines.gpu_memory import GpuWatch
from perfgate.engines.listener import foreign_listeners
from perfgate.engines.server_commands import Mode, ServerCommand, server_command
from perfgate.errors import ConfigError, ExitCode, InfrastructureError, PerfgateError
from perfgate.probe import DIR_VARIABLE, probe_env
from perfgate.progress import SILENT, Reporter, Step, clean_line, format_duration
from perfgate.sglang.facts import ARGUMENT_CHECKS, SglangRelease

LOG_TAIL_LINES = 20
PORT_ATTEMPTS = 3  # launches of a server whose port was taken while it started
PORT_IN_USE = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)
OWN_OUTPUT_BYTES = 65536  # of a launch's output, where a port in use is looked for
REFUSAL_SCAN_LINES = 400  # enough for a traceback through SGLang's argument checks
ARGPARSE_ERROR = re.compile(r"^[^\s:][^:]*: error: .+")
TRACEBACK = "Traceback (most recent call last):"
LAST_LINE_BYTES = 4096  # enough for a status line; a server's log may grow to megabytes
STOP_GRACE_S = 10.0
# After a request failed: how long the server may take to exit, when that was why (a rank
# that died ends an embedded server within about two seconds; see embedded/ranks.py).
ENDED_WAIT_S = 5.0
ERROR_LINE = re.compile(r"^error: (.+)$")  # a server's last word on why it ends
SUPERVISOR_LINE = re.compile(r"^perfgate supervisor: (the server .+)$")
# Run as a script, not `-m`: it needs nothing but the standard library, wherever perfgate is.
SUPERVISOR = Path(supervise.__file__).resolve()
# Set in every server's environment (and so in every process it spawns), to
# `<scenario>/<mode>/<launch id>`: the launcher finds every process of one launch by it, and
# the runner's job hooks find servers an earlier job left behind (perfgate.runner.leftovers).
SERVER_MARKER = "PERFGATE_SERVER"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def probed_command(
    scenario: Scenario,
    mode: Mode,
    probe_dir: Path | None,
    sglang: SglangRelease | None,
    extra_env: Mapping[str, str] | None = None,
) -> ServerCommand:
    """The command line of one of a scenario's servers on a free port, with the probe writing
    into `probe_dir` (the probe off where it is None) for SGLang release `sglang` (the
    preflight's; None for the embedded engine), and `extra_env` on top. Every path that starts
    a server (a gate run, a profile, `perfgate servers`) builds its command here."""
    if probe_dir is None:
        env = {DIR_VARIABLE: ""}
    else:
        version = sglang.version if sglang else None
        env = probe_env(
            probe_dir, scenario.engine, engine_version=version, mode=mode, scenario_env=scenario.env
        )
    env.update(extra_env or {})
    return server_command(scenario, mode, port=free_port(), extra_env=env, sglang=sglang)


def check_port_free(host: str, port: int) -> None:
    """Refuse to launch onto a port something already holds (a server left behind, say)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            raise InfrastructureError(
                f"port {port} on {host} is not free ({error.strerror}): a server left behind? "
                f"stop what listens there (`ss -ltnp 'sport = :{port}'`) and run again"
            ) from None


class Server:
    """A running server process and where its log goes."""

    def __init__(
        self,
        command: ServerCommand,
        process: subprocess.Popen[bytes],
        log_path: Path,
        lifeline: int | None = None,
        tag: str | None = None,
        output_from: int = 0,
    ):
        self.command = command
        self.output_from = output_from  # where this launch's own output begins in the log
        # The supervisor, leader of the server's process group. It is reaped only at the end
        # of `stop`: until then its pid, which is the group's id, cannot name another group.
        self.process = process
        self.log_path = log_path
        self._lifeline = lifeline  # closing it tells the supervisor to end the server
        self.tag = tag  # SERVER_MARKER's value in this launch's processes, and no other's
        self.ended_by_itself: int | None = None  # its exit code, had it exited before `stop`

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

    def own_output(self, max_bytes: int = OWN_OUTPUT_BYTES) -> str:
        """The last `max_bytes` of what this launch wrote to the log (not an earlier launch's
        lines, nor the command line start_server wrote)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(log.seek(0, os.SEEK_END) - max_bytes, self.output_from))
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def last_log_line(self) -> str:
        """Return the last line the server logged, fit for a status line."""
        try:
            with self.log_path.open("rb") as log:
                start = max(log.seek(0, os.SEEK_END) - LAST_LINE_BYTES, 0)
                log.seek(start)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        if start == 0:  # the first line is the command line start_server wrote, not the server's
            text = text.partition("\n")[2]
        return clean_line(text)

    def exit_code(self) -> int | None:
        """The supervisor's exit code once it has exited, else None; it is not reaped here."""
        if self.process.returncode is not None:
            return self.process.returncode
        try:
            found = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (AttributeError, ChildProcessError):  # no waitid here; or reaped already
            return self.process.poll()
        if found is None:
            return None
        return found.si_status if found.si_code == os.CLD_EXITED else -found.si_status

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to `timeout_s` for the supervisor to exit (not reaping it); its code."""
        deadline = time.monotonic() + timeout_s
        while (code := self.exit_code()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return code

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """End every process of the server, and return once each one has exited.

        SIGTERM to the process group, SIGKILL after `grace_s`; then every process still in
        the group or carrying this launch's SERVER_MARKER (one that left the group) is
        killed and waited for. The group is signalled only while its leader, the
        supervisor, is unreaped, so its id names no other group. Returns the supervisor's
        exit code; raises InfrastructureError naming any process that did not exit within
        `grace_s` of SIGKILL (stuck in the kernel, say).
        """
        self.ended_by_itself = self.exit_code()
        if self.ended_by_itself is None:
            self._signal_group(signal.SIGTERM)
            self._cut_lifeline()  # the supervisor sweeps what left the group, then exits
            self.wait_exit(grace_s + 5.0)
        # Children of the server (schedulers, TP ranks) may outlive it: end the group regardless.
        self._signal_group(signal.SIGKILL)
        self._cut_lifeline()
        self.wait_exit(grace_s)
        left = self._end_the_rest(grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        if left:
            raise InfrastructureError(
                f"{len(left)} process(es) of the {self.command.mode} server of scenario "
                f"{self.command.scenario!r} did not exit within {grace_s:g} s of SIGKILL: "
                + "; ".join(processes.describe(p) for p in left)
                + "; they may hold a port or GPU memory: stop them (`kill -9`) or reboot"
            )
        return self.process.returncode

    def remaining(self) -> list[processes.ProcessInfo]:
        """The running processes of this server: in its group (while the group is known to be
        its own) or carrying its SERVER_MARKER; the supervisor left out."""
        group = self.process.pid if self.process.returncode is None else None
        found = []
        for process in processes.iter_processes():
            if process.pid == self.process.pid or not process.alive:
                continue
            tagged = self.tag is not None and (process.environ or {}).get(SERVER_MARKER) == self.tag
            if tagged or (group is not None and process.pgrp == group):
                found.append(process)
        return found

    def _end_the_rest(self, timeout_s: float) -> list[processes.ProcessInfo]:
        rest = self.remaining()
        processes.send_all(rest, signal.SIGKILL)
        return processes.wait_gone(rest, timeout_s)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.process.returncode is not None:
            return  # reaped: its id may name another group by now; the rest goes by the marker
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def _cut_lifeline(self) -> None:
        if self._lifeline is not None:
            with contextlib.suppress(OSError):
                os.close(self._lifeline)
            self._lifeline = None


def supervised_argv(command: ServerCommand, lifeline: int) -> list[str]:
    """The command line that runs `command` under perfgate's supervisor."""
    return [sys.executable, str(SUPERVISOR), "--lifeline", str(lifeline), "--", *command.argv]


def start_server(
    command: ServerCommand,
    log_path: Path,
    startup_timeout_s: float,
    progress: Reporter = SILENT,
) -> Server:
    """Launch `command`, wait until `/health` answers, and return the running server.

    The server runs under `perfgate.engines.supervise`, in its own process group, so that it
    is ended with everything it spawned however this process ends. While it starts,
    `progress` shows the time so far and the last line of its log. A server that exits
    before it is healthy because a port it wanted was taken meanwhile (its own, chosen free
    when the command was built, or one it chose for itself) is launched again on another
    free port, up to PORT_ATTEMPTS launches; `server.command` is the command that serves.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _start_once(command, log_path, startup_timeout_s, progress, append=attempt > 1)
        except PortTaken as taken:
            again = command.on_port(_other_free_port(command.host, command.port))
            if again is None:
                raise taken.error from None
            if attempt == PORT_ATTEMPTS:
                raise InfrastructureError(
                    f"the {command.mode} server of scenario {command.scenario!r} could not "
                    f"start: a port it wanted was taken at each of its {PORT_ATTEMPTS} launches "
                    f"(the last said: {taken.line}); find what takes ports on {command.host} "
                    f"(`ss -ltnp`) and run again (log: {log_path})",
                    detail=taken.error.detail,
                ) from None
            progress.note(
                f"{command.scenario}: the {command.mode} server found a port taken "
                f"({taken.line}); starting it again on port {again.port}"
            )
            with log_path.open("ab") as log:
                log.write(
                    f"perfgate: a port was taken ({taken.line}); again on {again.port}\n".encode()
                )
            command = again
    raise AssertionError("unreachable")


class PortTaken(Exception):
    """A server exited before it was healthy because a port it wanted was in use."""

    def __init__(self, error: PerfgateError, line: str):
        super().__init__(line)
        self.error, self.line = error, line


def _other_free_port(host: str, taken: int) -> int:
    while (port := free_port(host)) == taken:
        continue
    return port


def _start_once(
    command: ServerCommand,
    log_path: Path,
    startup_timeout_s: float,
    progress: Reporter,
    *,
    append: bool,
) -> Server:
    check_port_free(command.host, command.port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{command.scenario}/{command.mode}/{uuid.uuid4().hex[:12]}"
    env = {**os.environ, **command.env, SERVER_MARKER: tag}
    read_end, write_end = os.pipe()
    try:
        with log_path.open("ab" if append else "wb") as log:
            log.write(f"$ {command.shell()}\n".encode())
            log.flush()
            output_from = log.tell()
            process = _spawn(command, read_end, env, log)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    server = Server(command, process, log_path, write_end, tag, output_from)
    try:
        with progress.step(f"{command.scenario}: starting {command.mode} server") as step:
            _wait_healthy(server, startup_timeout_s, step)
            step.done(f"ready in {format_duration(step.elapsed_s)}")
    except BaseException:
        stop_in_flight(server)
        raise
    return server


def _spawn(
    command: ServerCommand, lifeline: int, env: dict[str, str], log: IO[bytes]
) -> subprocess.Popen[bytes]:
    # The supervisor would start it; refuse here what it could not start, with the reason.
    if shutil.which(command.argv[0], path=env.get("PATH")) is None:
        raise InfrastructureError(
            f"cannot start the {command.mode} server of scenario {command.scenario!r}: "
            f"{command.argv[0]}: no such executable"
        )
    try:
        return subprocess.Popen(
            supervised_argv(command, lifeline),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(lifeline,),
            start_new_session=True,  # its own process group, so teardown reaches children
        )
    except OSError as error:
        raise InfrastructureError(
            f"cannot start the {command.mode} server of scenario {command.scenario!r}: "
            f"{command.argv[0]}: {error.strerror}"
        ) from None


@contextlib.contextmanager
def running_server(
    command: ServerCommand,
    log_path: Path,
    startup_timeout_s: float,
    *,
    gpus: Sequence[Gpu] = (),
    release_timeout_s: float = 300.0,
    progress: Reporter = SILENT,
) -> Iterator[Server]:
    """Run a server for the duration of a `with` block; it is stopped however the block ends.

    With `gpus`, the block ends only once their memory is back where it was before the server
    started (the next server must find them free), or raises an InfrastructureError.
    """
    watch = GpuWatch.snapshot(gpus) if gpus else None
    try:
        server = start_server(command, log_path, startup_timeout_s, progress)
        try:
            yield server
        except InfrastructureError as error:
            # A request failed: when the server ended meanwhile, that is the failure to report.
            ended = None if isinstance(error, RequestRefused) else server.wait_exit(ENDED_WAIT_S)
            if ended is None:
                raise
            raise ended_error(server, ended, error) from error
        finally:
            stop_in_flight(server)
        if server.ended_by_itself not in (None, 0):  # after the last request, say
            raise ended_error(server, server.ended_by_itself)
    finally:
        if watch is not None:
            _wait_released(watch, command, release_timeout_s)


def stop_in_flight(server: Server) -> None:
    """`server.stop()`; while another exception is on its way, a failure to stop is added to
    that one instead of replacing it."""
    in_flight = sys.exc_info()[1]
    try:
        server.stop()
    except InfrastructureError as error:
        if in_flight is None:
            raise
        also(in_flight, str(error))


def _wait_released(watch: GpuWatch, command: ServerCommand, timeout_s: float) -> None:
    what = f"the {command.mode} server of scenario {command.scenario!r}"
    in_flight = sys.exc_info()[1]
    try:
        watch.wait_released(what, timeout_s)
    except InfrastructureError as error:
        if in_flight is None:
            raise
        also(in_flight, str(error))  # the first failure stays the one reported


def also(error: BaseException, more: str) -> None:
    """Add `more` to `error`: to its message where it is perfgate's (what the user reads),
    else as a note."""
    if isinstance(error, PerfgateError) and error.args:
        error.args = (f"{error.args[0]}; also: {more}", *error.args[1:])
    else:
        error.add_note(f"also: {more}")


def ended_error(server: Server, code: int, cause: Exception | None = None) -> InfrastructureError:
    """The error of a server that ended while perfgate used it: its own last word on why (a
    rank that failed, say), else how its process ended; `cause`, the request that failed."""
    command = server.command
    where = f"the {command.mode} server of scenario {command.scenario!r}"
    lines = server.log_tail(REFUSAL_SCAN_LINES).splitlines()
    error = _last_match(lines, ERROR_LINE)
    killed = _last_match(lines, SUPERVISOR_LINE)
    if error is not None:  # what follows it: the lines it quotes (a failed rank's last ones)
        index, why = error
        detail = "\n".join(lines[index + 1 : index + 1 + LOG_TAIL_LINES]) or server.log_tail()
    elif killed is not None:  # what came before: the server's last lines
        index, why = killed
        detail = "\n".join(lines[: index + 1][-LOG_TAIL_LINES:])
    else:
        why, detail = f"it exited with code {code}", server.log_tail()
    tp = _tp_size(command.argv)
    if why.startswith("the server (pid ") and tp > 1:  # the supervisor's line
        why = why.replace("the server (pid ", f"the server (rank 0 of {tp}, pid ", 1)
    if cause is not None:
        detail += f"\nthe request that failed: {cause}"
    return InfrastructureError(
        f"{where} ended while perfgate used it: {why.rstrip('.:')}; its log: {server.log_path}",
        detail=detail,
    )


def _last_match(lines: Sequence[str], pattern: re.Pattern[str]) -> tuple[int, str] | None:
    for index in range(len(lines) - 1, -1, -1):
        found = pattern.match(lines[index])
        if found:
            return index, found.group(1)
    return None


def _tp_size(argv: Sequence[str]) -> int:
    for flag in ("--tp-size", "--tp", "--tensor-parallel-size"):
        if flag in argv[:-1]:
            value = argv[list(argv).index(flag) + 1]
            return int(value) if value.isdigit() else 1
    return 1


def check_listener(server: Server) -> None:
    """Refuse the server's port when a process outside the server listens on it (one that
    took the free port while the server was starting; see perfgate.engines.listener)."""
    host, port = server.command.host, server.command.port
    found = foreign_listeners(host, port, server.process.pid)
    if found:
        raise InfrastructureError(
            f"{host}:{port} is answered by {', '.join(found)}, not by the "
            f"{server.command.mode} server perfgate started for scenario "
            f"{server.command.scenario!r}; stop that process (it took the port while the server "
            "was starting) and run again",
            detail=server.log_tail(),
        )


def _wait_healthy(server: Server, timeout_s: float, step: Step) -> None:
    deadline = time.monotonic() + timeout_s
    url = server.base_url + "/health"
    with httpx.Client(timeout=2.0, verify=tls_context()) as client:
        while True:
            code = server.exit_code()
            if code is not None:
                error = _exited_error(server, code)
                taken = _port_taken(server.own_output())
                if taken is not None and not isinstance(error, ConfigError):
                    raise PortTaken(error, taken)
                raise error
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    check_listener(server)
                    return
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"the {server.command.mode} server of scenario {server.command.scenario!r} "
                    f"was not healthy after {timeout_s:.0f} s (log: {server.log_path}); "
                    "if it is only slow, raise the scenario's startup_timeout_s",
                    detail=server.log_tail(),
                )
            step.update(server.last_log_line)
            time.sleep(0.1)


def _exited_error(server: Server, code: int) -> ConfigError | InfrastructureError:
    where = f"the {server.command.mode} server of scenario {server.command.scenario!r}"
    modules = ARGUMENT_CHECKS if server.command.engine == "sglang" else ()
    refusal = refused_arguments(code, server.log_tail(REFUSAL_SCAN_LINES), modules)
    if refusal is not None:
        # The server refused its arguments: a configuration mistake, not a machine failure.
        error = ConfigError(
            f"{where} refused its arguments: {refusal}",
            fix=f"fix the scenario (full log: {server.log_path})",
        )
        error.detail = server.log_tail()
        return error
    log = server.log_tail(REFUSAL_SCAN_LINES)
    raised = last_exception(log)
    return InfrastructureError(
        f"{where} exited with code {code} before it was healthy"
        f"{f', last raised {raised}' if raised else ''}; "
        f"read its log {server.log_path} and fix the cause",
        detail=server.log_tail(),
    )


def _port_taken(output: str) -> str | None:
    """The line of a launch's `output` that says a port was in use, or None: the embedded
    server's "cannot listen on HOST:PORT: Address already in use", uvicorn's "[Errno 98]
    error while attempting to bind on address (...): address already in use", torch's
    rendezvous "... EADDRINUSE ..."."""
    for line in reversed(output.splitlines()):
        if PORT_IN_USE.search(line):
            return clean_line(line)
    return None


def last_exception(log: str) -> str | None:
    """The exception line of the last traceback in `log`, or None. SGLang's processes write
    theirs behind a time stamp ("[...] Scheduler hit an exception: Traceback ..."), so the
    traceback's first line is found by its end."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith(TRACEBACK)]
    if not starts:
        return None
    raised = next((line for line in lines[starts[-1] + 1 :] if line[:1] not in " \t"), "")
    return clean_line(raised) or None


def refused_arguments(code: int, log: str, modules: Sequence[str] = ()) -> str | None:
    """The server's own words when its exit `code` and `log` say it refused its arguments.

    64: the embedded engine's refusal, its last line. 2: argparse's (`PROG: error: ...`).
    1: a ValueError or AssertionError raised through one of `modules` (where an engine checks
    its arguments, e.g. SGLang's `ServerArgs`), the exception's line. None for anything else:
    a crash is the machine's failure, not the scenario's.
    """
    lines = log.splitlines()
    if code == ExitCode.BAD_INPUT:
        return clean_line(log)
    if code == 2:
        found = [m.group(0) for m in map(ARGPARSE_ERROR.match, lines) if m]
        return clean_line(found[-1]) if found else None
    if code != 1 or not modules or TRACEBACK not in lines:
        return None
    last = lines[len(lines) - 1 - lines[::-1].index(TRACEBACK) :]
    frames = [line for line in last if line.startswith('  File "')]
    raised = next((line for line in last[1:] if not line.startswith(" ")), "")
    through = any(module in frame for frame in frames for module in modules)
    if through and raised.startswith(("ValueError", "AssertionError")):
        return clean_line(raised)
    return None
