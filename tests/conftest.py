"""Shared helpers: small configs that run the embedded engine in seconds."""

from __future__ import annotations

import gc
import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from perfgate import devices
from perfgate.engines.supervise import _processes
from perfgate.gate.verdict import Status
from perfgate.hardware import default_profile

from . import cpu_costs
from .hang import HANG_S
from .store.postgres import REQUIRE_ENV, PostgresServer, PostgresUnavailable, running_postgres

if TYPE_CHECKING:
    from .recorded import RecordedProject

REPO = Path(__file__).resolve().parent.parent
# This machine's runner profile, as a gate run names it (the tests run without a GPU).
HERE_PROFILE = default_profile(None)

TINY_SCENARIO = """
[perfgate]
default_scenarios = ["tiny"]
baselines = "baselines"
history = "sqlite:///history.db"

[scenarios.tiny]
engine = "embedded"
model = "perfgate/llama-tiny"
draft = "perfgate/eagle3-llama-tiny"
steps = 3
topk = 1
draft_tokens = 4
dtype = "float32"
device = "cpu"
prompts = ["Return the number of items", "Create a new instance of"]
max_new_tokens = 24
repeats = 3
warmup = 1
startup_timeout_s = 60
extra_args = ["--num-threads", "1"]

[scenarios.tiny.tolerances]
output_tok_s = 0.6
speedup = 0.6
accept_length = 0.05
verify_ms = 0.6
"""
# The same judged on its first run alone: three launches on a loaded CPU scatter wide, and the
# plan's first look would wait for three runs, each a server pair, before a verdict (measuring
# again while one is inconclusive: tests/test_judging.py).
ONE_RUN_SCENARIO = TINY_SCENARIO.replace("warmup = 1", "warmup = 1\nmax_runs = 1")


# The exit codes of a run that measured and judged: pass, regression, inconclusive. On a shared
# 2-core machine whose load swings fivefold, which of them the same code gets is the load's
# choice; a test of a same-code run asserts that it was judged (and recorded), not that it
# passed. A change the gate must catch is made so large that no load swing hides it.
VERDICT_CODES = (0, 1, 75)
# Verify slowed by this much is 30 times slower than the tiny model's verify (6-7 ms a cycle
# in all): its tok/s falls 20-fold, beyond a fivefold swing of the baseline's and the
# scenario's 60% tolerance with room to spare.
SLOW_VERIFY_MS = "200"


@pytest.fixture(autouse=True)
def _developer_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test as on a developer's machine: `.ci/run` sets CI=true, which makes every
    gate run demand a reviewed baseline. The tests of that behaviour set CI themselves."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _no_parallel_runner_in_children() -> Iterator[None]:
    """Under `pytest -n`, a worker's PYTEST_XDIST_* variables would reach the pytest that
    `perfgate run` starts, and pytest-benchmark there would take itself for an xdist worker
    and stop timing: the gate runs a test starts are never parallel ones. Session-wide, so
    module fixtures that run the gate see it too."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def _gpus_read_afresh() -> Iterator[None]:
    """Each test reads the GPUs it sets up: what a test before it read once is forgotten."""
    devices.reset_cache()
    yield
    devices.reset_cache()


class FakeStream(io.StringIO):
    """A text stream that says it is (or is not) a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def run_perfgate_while(
    cwd: Path,
    argv: list[str],
    line: str | Sequence[str],
    during: Callable[[subprocess.Popen[bytes]], AbstractContextManager[object]],
) -> tuple[int, str]:
    """Run `perfgate ARGV`; once `line` shows in its output (several lines: each after the
    one before), enter `during(process)` (which may signal the process, as Ctrl-C does) and
    hold it till perfgate ends. Returns perfgate's exit code and output. The line is waited
    for under the hang guard (tests/hang.py); perfgate ending first fails, saying so."""
    lines = (line,) if isinstance(line, str) else tuple(line)
    output = cwd / "output.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGATE_DB_URL", "CI")}
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "perfgate", *argv],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + HANG_S
        while not _shown_in_order(output.read_text(errors="replace"), lines):
            ended = process.poll()
            if ended is not None and _shown_in_order(output.read_text(errors="replace"), lines):
                break  # written just before it ended: `during` sees it has ended
            assert ended is None, (
                f"perfgate ended (exit code {ended}) before {lines!r} showed in its "
                f"output:\n{output.read_text(errors='replace')}"
            )
            assert time.monotonic() < deadline, (
                f"{lines!r} did not show in {HANG_S} s:\n{output.read_text(errors='replace')}"
            )
            time.sleep(0.02)
        with during(process):
            code = process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, output.read_text(errors="replace")


def _shown_in_order(text: str, lines: Sequence[str]) -> bool:
    """Whether each of `lines` shows in `text`, each after the one before."""
    at = 0
    for line in lines:
        found = text.find(line, at)
        if found < 0:
            return False
        at = found + len(line)
    return True


def write_config(folder: Path, text: str = TINY_SCENARIO) -> Path:
    """Write a perfgate.toml into `folder` and return its path."""
    path = folder / "perfgate.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def run_perfgate(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = HANG_S,
    python_flags: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the `perfgate` CLI as a user would, in a fresh interpreter (`python_flags` first)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PERFGATE_DB_URL", None)
    full_env.pop("PERFGATE_PROFILE", None)
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "perfgate", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    cpu_costs.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT as a terminal delivers it, whoever started the suite; --cpu-costs (cpu_costs.py).

    Tests end `perfgate run` and its servers with SIGINT, as Ctrl-C does. A suite started in
    the background of a non-interactive shell, or under nohup, inherits SIGINT ignored, and an
    ignored signal stays ignored across exec: every process a test starts would then shrug it
    off. A handled signal is reset to its default at exec, so handling it here restores it.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cpu_costs.configure(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with slow tests first, each module kept whole (its fixtures set up once).

    On several workers (scripts/test), a minute-long test collected last would run alone at the
    end while the other worker idles; started first, the short tests fill in around it.
    """
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)  # stable: order kept within


def pytest_collection_finish() -> None:
    """Leave what collection imported (torch, the modules, the items) out of the garbage
    collector's passes: a process of the suite holds a heap of millions of objects that live as
    long as it does, which every full pass would walk again."""
    gc.freeze()


# A row of the verdict table (perfgate.verdict_text.render_verdicts): two spaces, the metric, then
# baseline, current, change, interval, tolerance and runs (each one word, "-" where unknown),
# and the verdict.
_VERDICT_ROW = re.compile(
    rf"  (?P<metric>[a-z0-9_]+)(?: +\S+){{6}}  (?P<verdict>{'|'.join(s.value for s in Status)})"
)


def verdict_table(output: str) -> dict[str, str]:
    """The last verdict table in a run's terminal output: each metric's verdict, by metric.

    Only the rows right under the table's header: the explanations and `why:` lines under them
    are indented alike and wrap at 100 columns, so a line's indent or word count says nothing.
    """
    lines = output.splitlines()
    headers = [
        i
        for i, line in enumerate(lines)
        if line.split()[:1] == ["metric"] and line.endswith("  verdict")
    ]
    assert headers, f"no verdict table in:\n{output}"
    table = {}
    for line in lines[headers[-1] + 1 :]:
        if not (row := _VERDICT_ROW.fullmatch(line)):
            break
        table[row["metric"]] = row["verdict"]
    return table


RUN_WAIT_S = 120.0  # how long a started `perfgate run` may take to reach a line or to end


def start_perfgate_run(folder: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `perfgate run` in `folder` in its own session, its output to a file; return both."""
    output = folder / "output.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGATE_DB_URL", "CI")}
    with output.open("wb") as out:  # a file, not a pipe: a process left behind never blocks
        process = subprocess.Popen(
            [sys.executable, "-m", "perfgate", "run"],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, as a shell job or a CI step has
        )
    return process, output


def wait_for_line(process: subprocess.Popen[bytes], output: Path, line: str) -> None:
    """Wait (at most RUN_RUN_WAIT_S) until the run's output shows `line`; fail if it ends first."""
    deadline = time.monotonic() + RUN_WAIT_S
    while line not in output.read_text(errors="replace"):
        assert process.poll() is None, f"perfgate run ended early:\n{output.read_text()}"
        assert time.monotonic() < deadline, f"no {line!r} within {RUN_WAIT_S:.0f} s"
        time.sleep(0.05)


def living(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie holds nothing)."""
    alive = {pid for pid, _, _, state, _ in _processes() if state != "Z"}
    return [pid for pid in pids if pid in alive]


def wait_until_gone(pids: list[int]) -> list[int]:
    """Wait (at most RUN_WAIT_S) until none of `pids` lives; return those still alive."""
    deadline = time.monotonic() + RUN_WAIT_S
    while living(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return living(pids)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (tests/store/postgres.py starts it with
    Debian's initdb and pg_ctl); without its binaries the test skips and says why, or fails
    where PERFGATE_REQUIRE_POSTGRES=1 (CI sets it)."""
    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailable as why:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but PostgreSQL cannot start: {why}")
        pytest.skip(f"PostgreSQL cases skipped: {why}")


@pytest.fixture(scope="session")
def recorded_project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> RecordedProject:
    """The tiny scenario's three recorded runs, approved as its baseline (tests/recorded.py):
    made once for the session, to be copied (`copy_to`), never changed."""
    from .recorded import shared_project  # it imports this module's helpers

    return shared_project(request.config, tmp_path_factory)
