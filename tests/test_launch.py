"""The launcher: health wait, errors with the log's tail, and no process left behind."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from perfgate.engines.launch import free_port, running_server, start_server
from perfgate.engines.server_commands import ServerCommand
from perfgate.errors import ConfigError, InfrastructureError
from perfgate.progress import Detail, Reporter, Step

from .conftest import FakeStream

# A stand-in server: a child process that also forks a grandchild, as SGLang's schedulers do.
SERVER = textwrap.dedent(
    """
    import http.server, os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[2], "w").write(f"{os.getpid()} {child.pid}")
    mode = sys.argv[3]
    if mode == "crash":
        print("loading weights failed: out of memory", flush=True); sys.exit(3)
    if mode == "die":  # SGLang 0.5.16 loading a draft whose weights do not fit its config
        print("[2026-12-02 05:18:43] Scheduler hit an exception: Traceback (most recent call last):")
        print('  File "sglang/srt/model_loader/weight_utils.py", line 1355, in default_weight_loader')
        print("    assert param.size() == loaded_weight.size(), (")
        print("AssertionError: Attempted to load weight (torch.Size([128, 256])) into parameter")
        print("Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]")
        print("[2026-12-02 05:18:43] Received sigquit from a child process.", flush=True)
        os.kill(os.getpid(), 9)
    if mode == "refuse":
        print("--speculative-num-steps must be >= 1", flush=True); sys.exit(64)
    if mode == "hang":
        time.sleep(600)
    if mode == "slow":  # each line stays the last one until the test has seen it used
        def shown(shard):
            while not os.path.exists(f"{sys.argv[2]}.shard{shard}"): time.sleep(0.01)
        print("loading shard 1 of 2", flush=True); shown(1)
        print("\x1b[32mloading\x1b[0m shard 2 of 2", flush=True); shown(2)
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
    """
)


def _command(tmp_path: Path, mode: str) -> tuple[ServerCommand, Path]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    pids = tmp_path / "pids"
    port = free_port()
    argv = (sys.executable, str(script), str(port), str(pids), mode)
    return ServerCommand("tiny", "embedded", "spec", argv, {}, "127.0.0.1", port), pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _assert_all_gone(pids_file: Path) -> None:
    deadline = time.monotonic() + 5
    pids = [int(p) for p in pids_file.read_text().split()]
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), f"left behind: {pids}"


def test_healthy_server_and_its_children_are_stopped(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "ok")
    with running_server(command, tmp_path / "log", startup_timeout_s=30) as server:
        assert server.process.poll() is None
    _assert_all_gone(pids)


def test_stopped_when_the_block_raises(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "ok")
    with pytest.raises(KeyboardInterrupt), running_server(command, tmp_path / "log", 30):
        raise KeyboardInterrupt
    _assert_all_gone(pids)


def test_crash_before_health_gives_the_log_tail(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "crash")
    with pytest.raises(InfrastructureError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    assert "exited with code 3 before it was healthy" in str(caught.value)
    assert "\n" not in str(caught.value), "the message is one line; the log tail is the detail"
    assert "out of memory" in caught.value.detail
    _assert_all_gone(pids)


def test_a_server_that_dies_loading_is_named_with_its_own_last_exception(
    tmp_path: Path,
) -> None:
    """SGLang's scheduler logs its traceback behind a time stamp and the server kills itself
    (137): the one-line message says what it raised, as a reader of the log would find it."""
    command, pids = _command(tmp_path, "die")
    with pytest.raises(InfrastructureError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    message = str(caught.value)
    assert "exited with code 137 before it was healthy" in message
    assert (
        "last raised AssertionError: Attempted to load weight (torch.Size([128, 256])) into "
        "parameter" in message
    ), message
    assert "\n" not in message
    _assert_all_gone(pids)


def test_refused_arguments_are_a_config_error(tmp_path: Path) -> None:
    command, _ = _command(tmp_path, "refuse")
    with pytest.raises(ConfigError, match="refused its arguments: --speculative-num-steps"):
        start_server(command, tmp_path / "log", startup_timeout_s=30)


def test_startup_timeout_stops_the_server(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "hang")
    with pytest.raises(InfrastructureError, match="not healthy after 1 s"):
        start_server(command, tmp_path / "log", startup_timeout_s=1)
    _assert_all_gone(pids)


def test_missing_interpreter(tmp_path: Path) -> None:
    command = ServerCommand(
        "tiny", "embedded", "spec", ("/nonexistent/python",), {}, "127.0.0.1", 1
    )
    with pytest.raises(InfrastructureError, match="cannot start the spec server"):
        start_server(command, tmp_path / "log", startup_timeout_s=1)


def _go_on_once(seen: Callable[[str], bool], pids_file: Path) -> None:
    """Let the "slow" stand-in log its next shard once `seen(its line)`: a start as slow as
    the test needs, and no slower than that."""

    def release() -> None:
        for shard in (1, 2):
            deadline = time.monotonic() + 10  # then the test's own assertions say what is missing
            while not seen(f"loading shard {shard} of 2") and time.monotonic() < deadline:
                time.sleep(0.01)
            Path(f"{pids_file}.shard{shard}").touch()

    threading.Thread(target=release, daemon=True).start()


def test_a_terminal_sees_the_start_and_the_servers_last_log_line(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "slow")
    stream = FakeStream(tty=True)
    _go_on_once(lambda line: f", {line}" in stream.getvalue(), pids)
    progress = Reporter(stream, width=lambda: 200, environ={"TERM": "xterm"}, interval_s=0.05)
    with running_server(command, tmp_path / "log", 30, progress=progress):
        pass
    _assert_all_gone(pids)
    shown = stream.getvalue()
    assert "\r\x1b[Ktiny: starting spec server: " in shown
    assert ", loading shard 1 of 2" in shown and ", loading shard 2 of 2" in shown
    assert "$ " not in shown, "the command line perfgate logged is not the server's"
    (last,) = re.findall(r"tiny: starting spec server: ready in [\d.]+ s", shown)
    assert shown.endswith(last + "\x1b[0m\n")


def test_a_log_gets_one_line_at_the_start_and_one_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, pids = _command(tmp_path, "slow")
    stream = FakeStream(tty=False)
    # The launcher handed each of the server's lines to the log's step, which shows none.
    details: list[str] = []
    real_update = Step.update

    def update(step: Step, detail: Detail) -> None:
        details.append(detail() if callable(detail) else detail)
        real_update(step, detail)

    monkeypatch.setattr(Step, "update", update)
    _go_on_once(lambda line: line in details, pids)
    with running_server(command, tmp_path / "log", 30, progress=Reporter(stream)):
        pass
    start, ready = stream.getvalue().splitlines()
    assert start == "tiny: starting spec server"
    assert re.fullmatch(r"tiny: starting spec server: ready in [\d.]+ s", ready)


def test_a_log_gets_the_failure_of_a_start(tmp_path: Path) -> None:
    command, _ = _command(tmp_path, "crash")
    stream = FakeStream(tty=False)
    with pytest.raises(InfrastructureError):
        start_server(command, tmp_path / "log", 30, Reporter(stream))
    start, failed = stream.getvalue().splitlines()
    assert start == "tiny: starting spec server"
    assert re.fullmatch(
        r"tiny: starting spec server: failed after [\d.]+ s: the spec server of scenario "
        r"'tiny' exited with code 3 before it was healthy; .*",
        failed,
    )


@pytest.mark.slow
def test_the_embedded_server_is_never_a_copy_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfgate.config import load_config
    from perfgate.engines.server_commands import server_command
    from perfgate.probe import DIR_VARIABLE

    from .conftest import write_config

    (tmp_path / "perfgate").mkdir()
    (tmp_path / "perfgate" / "__init__.py").write_text('raise ImportError("the copy here")\n')
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    monkeypatch.chdir(tmp_path)  # the server starts here; without the probe's start-up hook
    command = server_command(scenario, "plain", port=free_port(), extra_env={DIR_VARIABLE: ""})
    with running_server(command, tmp_path / "log", startup_timeout_s=60) as server:
        assert server.process.poll() is None
    assert "the copy here" not in (tmp_path / "log").read_text()


def _fake_sglang(tmp_path: Path, module: str, error: str) -> ServerCommand:
    """A stand-in SGLang whose start-up raises `error` from `module` (a path in the package),
    with the real interpreter's traceback, and exits 1 as `python -m sglang.launch_server`."""
    package = tmp_path / "fake"
    path = package / module
    path.parent.mkdir(parents=True)
    for folder in [path.parent, *path.parent.parents]:
        if folder == package:
            break
        (folder / "__init__.py").touch()
    path.write_text(f"def check():\n    raise {error}\n")
    dotted = module.removesuffix(".py").replace("/", ".")
    script = f"import sys; sys.path.insert(0, {str(package)!r}); import {dotted} as m; m.check()"
    argv = (sys.executable, "-c", script)
    return ServerCommand("tp8", "sglang", "spec", argv, {}, "127.0.0.1", free_port())


@pytest.mark.parametrize(
    "module",
    ["sglang/srt/server_args.py", "sglang/srt/arg_groups/speculative_hook.py"],
    ids=["server-args", "arg-groups"],
)
def test_a_server_args_error_of_sglang_is_bad_input_with_its_message(
    tmp_path: Path, module: str
) -> None:
    rule = "trtllm_mha backend only supports topk = 1 for speculative decoding."
    command = _fake_sglang(tmp_path, module, f"ValueError({rule!r})")
    with pytest.raises(ConfigError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    assert caught.value.exit_code == 64
    assert f"refused its arguments: ValueError: {rule}" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_any_other_crash_of_sglang_stays_an_infrastructure_failure(tmp_path: Path) -> None:
    error = "RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')"
    command = _fake_sglang(tmp_path, "sglang/srt/model_executor/model_runner.py", error)
    with pytest.raises(InfrastructureError, match="exited with code 1 before it was healthy"):
        start_server(command, tmp_path / "log", startup_timeout_s=30)


# A server that takes its time to load (as SGLang does a model), and a process that takes its
# port meanwhile: it binds once the server has started, and answers everything with 200.
SLOW_SERVER = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(600)"
IMPOSTOR = textwrap.dedent(
    """
    import http.server, pathlib, sys, time
    trigger, port = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    for _ in range(1200):  # at most two minutes
        if trigger.exists():
            break
        time.sleep(0.1)
    class Yes(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
            self.wfile.write(b"{}")
        do_POST = do_GET
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), Yes).serve_forever()
    """
)


# A stand-in that binds its port only once told to, as a server binds after loading its
# models, and says what the embedded server says when the port was taken meanwhile.
LATE_BINDER = textwrap.dedent(
    """
    import http.server, os, sys, time
    signals, port = sys.argv[1], int(sys.argv[sys.argv.index("--port") + 1])
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    first = not os.path.exists(f"{signals}.launched")
    open(f"{signals}.launched", "a").close()
    if mode == "always-taken" or (mode == "taken-then-crash" and first):
        print(f"error: cannot listen on 127.0.0.1:{port}: Address already in use", flush=True)
        sys.exit(69)
    if mode == "taken-then-crash":
        print("loading weights failed: out of memory", flush=True); sys.exit(3)
    open(f"{signals}.started-{port}", "w").close()
    while not os.path.exists(f"{signals}.go"):
        time.sleep(0.01)
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a): pass
    try:
        server = http.server.HTTPServer(("127.0.0.1", port), Ok)
    except OSError as error:
        print(f"error: cannot listen on 127.0.0.1:{port}: {error.strerror}", flush=True)
        sys.exit(69)
    server.serve_forever()
    """
)


def _late_binder(tmp_path: Path, *extra: str) -> tuple[ServerCommand, Path]:
    signals, port = tmp_path / "signal", free_port()
    argv = (sys.executable, "-c", LATE_BINDER, str(signals), "--port", str(port), *extra)
    return ServerCommand("tiny", "embedded", "spec", argv, {}, "127.0.0.1", port), signals


def test_a_server_whose_port_is_taken_while_it_starts_is_started_again_on_another(
    tmp_path: Path,
) -> None:
    """Another process takes the free port between the launcher's choice and the server's
    bind (a second test's server, say): the server exits saying so, and the launcher starts
    it again on another free port, keeping both starts in its log."""
    import socket

    command, signals = _late_binder(tmp_path)
    first = command.port
    impostor = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def take_the_port() -> None:
        deadline = time.monotonic() + 30
        while not Path(f"{signals}.started-{first}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        impostor.bind(("127.0.0.1", first))
        impostor.listen()
        Path(f"{signals}.go").touch()

    taker = threading.Thread(target=take_the_port, daemon=True)
    taker.start()
    stream = FakeStream(tty=False)
    try:
        with running_server(command, tmp_path / "log", 30, progress=Reporter(stream)) as server:
            assert server.command.port != first
            assert server.base_url == f"http://127.0.0.1:{server.command.port}"
            assert f"--port {server.command.port}" in server.command.shell()
            import httpx

            assert httpx.get(server.base_url + "/health").status_code == 200
    finally:
        taker.join(timeout=30)
        impostor.close()
    log = (tmp_path / "log").read_text()
    assert log.count("$ ") == 2, log
    assert f"cannot listen on 127.0.0.1:{first}: Address already in use" in log
    assert f"again on {server.command.port}" in log
    shown = stream.getvalue()
    assert (
        f"tiny: the spec server found a port taken (error: cannot listen on 127.0.0.1:{first}: "
        f"Address already in use); starting it again on port {server.command.port}" in shown
    ), shown


def test_a_port_taken_at_every_start_is_an_infrastructure_failure_that_says_so(
    tmp_path: Path,
) -> None:
    command, _ = _late_binder(tmp_path, "always-taken")
    with pytest.raises(InfrastructureError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    message = str(caught.value)
    assert "could not start: a port it wanted was taken at each of its 3 launches" in message
    assert "Address already in use" in message and "\n" not in message
    assert caught.value.exit_code == 69
    assert (tmp_path / "log").read_text().count("$ ") == 3


def test_a_start_again_that_crashes_otherwise_is_that_crash_not_another_start(
    tmp_path: Path,
) -> None:
    """The log keeps the first start's "Address already in use": the second start's own
    failure is read from its own lines."""
    command, _ = _late_binder(tmp_path, "taken-then-crash")
    with pytest.raises(InfrastructureError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    assert "exited with code 3 before it was healthy" in str(caught.value)
    assert (tmp_path / "log").read_text().count("$ ") == 2


def test_a_crash_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    command, _ = _command(tmp_path, "crash")
    with pytest.raises(InfrastructureError, match="exited with code 3"):
        start_server(command, tmp_path / "log", startup_timeout_s=30)
    assert (tmp_path / "log").read_text().count("$ ") == 1


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp")
def test_a_process_that_takes_the_port_first_is_not_taken_for_the_server(
    tmp_path: Path,
) -> None:
    import subprocess

    trigger, port = tmp_path / "server-started", free_port()
    argv = (sys.executable, "-c", SLOW_SERVER, str(trigger))
    command = ServerCommand("tp8", "sglang", "spec", argv, {}, "127.0.0.1", port)
    with subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(trigger), str(port)]) as impostor:
        try:
            with pytest.raises(InfrastructureError) as caught:
                start_server(command, tmp_path / "log", startup_timeout_s=120)
        finally:
            impostor.kill()
    message = str(caught.value)
    assert f"127.0.0.1:{port} is answered by pid {impostor.pid}" in message, message
    assert "not by the spec server perfgate started" in message and "\n" not in message


def test_the_server_itself_is_taken(tmp_path: Path) -> None:
    command, pids = _command(tmp_path, "ok")
    with running_server(command, tmp_path / "log", startup_timeout_s=30) as server:
        assert server.process.poll() is None
    _assert_all_gone(pids)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp")
@pytest.mark.parametrize(
    ("family", "bound", "asked"),
    [
        ("AF_INET", "127.0.0.1", "127.0.0.1"),
        ("AF_INET", "0.0.0.0", "127.0.0.1"),  # a wildcard takes the server's connections too
        ("AF_INET6", "::", "127.0.0.1"),
    ],
)
def test_listening_sockets_are_found_with_their_holder(family: str, bound: str, asked: str) -> None:
    import socket
    import subprocess

    from perfgate.engines.listener import foreign_listeners, listening_inodes

    try:
        sock = socket.socket(getattr(socket, family), socket.SOCK_STREAM)
        sock.bind((bound, 0))
    except OSError as error:  # no IPv6 here
        pytest.skip(str(error))
    with sock:
        sock.listen()
        port = sock.getsockname()[1]
        assert listening_inodes(asked, port) == [os.fstat(sock.fileno()).st_ino]
        assert foreign_listeners(asked, port, os.getpid()) == []  # this process holds it
        with subprocess.Popen(["sleep", "60"]) as stranger:  # a server that holds nothing
            try:
                (other,) = foreign_listeners(asked, port, stranger.pid) or [""]
            finally:
                stranger.kill()
        assert other.startswith(f"pid {os.getpid()} (")
