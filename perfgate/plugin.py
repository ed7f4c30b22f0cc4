"""The pytest plugin: options, fixtures, and the session's verdict at the end. Thin on purpose.

Inert until a test asks for a perfgate fixture: installing perfgate changes nothing in other
test suites. The session's state lives in `config.stash[GATE_SESSION]`.

PYTEST_DONT_REWRITE: named in PYTEST_PLUGINS, pytest marks this module for rewriting, and
under `perfgate run` it is imported already (see the package's docstring).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.ci.pointer import (
    clear_pointer,
    failed_pointer,
    restore_pointer,
    session_pointer,
    write_pointer,
)
from perfgate.errors import ConfigError, ExitCode, InternalError, PerfgateError
from perfgate.pipeline import GatePlan, ScenarioRun, severest
from perfgate.progress import reporter_for_pytest
from perfgate.session import GateSession
from perfgate.settings import add_options, resolve_settings
from perfgate.verdict_text import render_terminal_summary

GATE_SESSION = pytest.StashKey[GateSession | PerfgateError]()
HANDED_PLAN = pytest.StashKey[GatePlan]()  # the plan `perfgate run` built, handed to pytest
FINISH_ERROR = pytest.StashKey[PerfgateError]()
EARLIER_POINTER = pytest.StashKey[str | None]()  # the text of the pointer this session removed
# The errors a test has failed with so far, by id, with the name of the first test they failed.
TOLD = pytest.StashKey[dict[int, tuple[PerfgateError, str]]]()
INTERRUPTED = (
    "perfgate: interrupted: nothing was recorded nor reported; the previous session's "
    "pointer is kept"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: performance gate for speculative decoding")
    add_options(group.addoption, flag_prefix="--perfgate-", dest_prefix="perfgate_")


class HandedPlan:
    """Hands pytest the plan `perfgate run` built and checked, so that the session measures and
    judges by that plan rather than by one built again from pytest's options."""

    def __init__(self, plan: GatePlan) -> None:
        self.plan = plan

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[HANDED_PLAN] = self.plan


def _new_session(config: pytest.Config) -> GateSession:
    """The session over the handed plan, or (pytest run alone) over one built from options."""
    progress = reporter_for_pytest(config)
    handed = config.stash.get(HANDED_PLAN, None)

    def given(dest: str) -> object:
        return config.getoption(f"perfgate_{dest}")

    if handed is None:
        return GateSession(resolve_settings(given), progress=progress)
    if resolve_settings(given, environ={}) != resolve_settings(lambda dest: None, environ={}):
        raise ConfigError(
            "perfgate's options were given to pytest after `--`",
            field="--perfgate-*",
            fix="give them to `perfgate run` itself, before `--` (e.g. `perfgate run "
            "--scenario S`); what follows `--` goes to pytest",
        )
    return GateSession(handed.options, progress=progress, plan=handed)


def gate_session(config: pytest.Config) -> GateSession:
    """The session's GateSession, created on first use; raises the config's error if any."""
    value = config.stash.get(GATE_SESSION, None)
    if value is None:
        try:
            value = _new_session(config)
        except PerfgateError as error:
            value = error
        except Exception as error:  # a bug: its own code, and its traceback kept to be shown
            detail = traceback.format_exc().rstrip()
            value = InternalError("starting the gate session", error, detail=detail)
        # An older session's must not pass for this one's.
        config.stash[EARLIER_POINTER] = clear_pointer(_pointer_root(value))
        config.stash[GATE_SESSION] = value
    if isinstance(value, PerfgateError):
        raise value
    return value


def _pointer_root(value: GateSession | PerfgateError) -> Path:
    """Where the session's pointer file goes: beside its config (here, without one)."""
    return value.config.path.parent if isinstance(value, GateSession) else Path.cwd()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perfgate_scenario" not in metafunc.fixturenames:
        return
    try:
        names = list(gate_session(metafunc.config).scenarios)
    except PerfgateError:
        names = ["invalid-config"]  # the perfgate_session fixture reports the error
    metafunc.parametrize("perfgate_scenario", names, scope="session")


@pytest.fixture(scope="session")
def perfgate_session(request: pytest.FixtureRequest) -> GateSession:
    """The gate session: selected scenarios, baselines, history."""
    try:
        return gate_session(request.config)
    except PerfgateError as error:
        failure = error  # failed outside the `except`: no "During handling of the above..."
    # Every test of the session fails with this; a bug's traceback ends the session, once.
    pytest.fail(f"perfgate: {failure}", pytrace=False)


@pytest.fixture(scope="session")
def scenario_run(perfgate_session: GateSession, perfgate_scenario: str) -> ScenarioRun:
    """One scenario of the session; its servers start when a test first needs them."""
    return perfgate_session.run_for(perfgate_scenario)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    # A perfgate error is a message for the user, not a traceback; failed outside the
    # `except`, so that pytest does not print it twice ("During handling of the above...").
    try:
        return (yield)
    except PerfgateError as error:
        failure = error
    except AssertionError:  # a verdict or a check of the suites: the test's own failure
        raise
    except Exception as error:  # a bug: pytest shows its traceback; the session its code
        value = item.config.stash.get(GATE_SESSION, None)
        if isinstance(value, GateSession) and "perfgate_session" in getattr(
            item, "fixturenames", ()
        ):
            value.internal_errors.append(InternalError(item.nodeid, error))
        raise
    pytest.fail(_said_once(item, failure), pytrace=False)


def _said_once(item: pytest.Item, error: PerfgateError) -> str:
    """The failure of `item` in words: `error` and its detail the first time a test meets it;
    a scenario that was not measured (a preflight refusal, a server that did not start) fails
    each of its later tests with the same error, and those name the first test instead."""
    told = item.config.stash.setdefault(TOLD, {})
    if id(error) in told:
        first = told[id(error)][1]
        callspec = getattr(item, "callspec", None)
        scenario = callspec.params.get("perfgate_scenario") if callspec else None
        which = f"scenario {scenario!r}" if scenario else "this test's scenario"
        return f"perfgate: {which} was not measured: see {first} above"
    told[id(error)] = (error, item.name)  # the error kept: its id stays its own
    detail = f"\n{error.detail}" if error.detail else ""
    return f"perfgate: {error}{detail}"


# The exit statuses after which pytest prints its terminal summary (_pytest.terminal).
_SUMMARISED = (
    pytest.ExitCode.OK,
    pytest.ExitCode.TESTS_FAILED,
    pytest.ExitCode.INTERRUPTED,
    pytest.ExitCode.USAGE_ERROR,
    pytest.ExitCode.NO_TESTS_COLLECTED,
)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, Any, Any]:
    """Finish the gate session (record, report, the exit code), let pytest end (its summary,
    durations, pytest-benchmark's table, the tests' counts), then print the verdict: the last
    thing the session prints."""
    _finish(session, exitstatus)
    result = yield
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not reporter.no_summary and exitstatus in _SUMMARISED:
        _write_verdict(reporter, exitstatus, session.config)
    return result


def _finish(session: pytest.Session, exitstatus: int) -> None:
    value = session.config.stash.get(GATE_SESSION, None)
    if value is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        # Ctrl-C: a run cut short is not recorded half-done, nor judged, nor measured again.
        with contextlib.suppress(OSError):
            restore_pointer(_pointer_root(value), session.config.stash.get(EARLIER_POINTER, None))
        return
    if isinstance(value, PerfgateError):
        code, pointer = value.exit_code, failed_pointer(value)
    else:
        try:
            code = value.finish()
            pointer = session_pointer(value, None)
        except PerfgateError as error:
            session.config.stash[FINISH_ERROR] = error
            value.exit_code = code = severest([value.exit_code, error.exit_code])
            pointer = session_pointer(value, error)
    # perfgate's code says more than pytest's "some test failed"; pytest's own problems
    # (interrupted, usage, internal error) keep theirs.
    if code != ExitCode.PASS and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = int(code)
    with contextlib.suppress(OSError):  # a read-only checkout still gets its verdict
        write_pointer(_pointer_root(value), replace(pointer, exit_code=int(session.exitstatus)))


def _write_verdict(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    value = config.stash.get(GATE_SESSION, None)
    if value is None:
        return
    terminalreporter.section("perfgate")
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        terminalreporter.write_line(INTERRUPTED)
        terminalreporter.write_line(f"perfgate exit code: {int(exitstatus)}")
        return
    if isinstance(value, InternalError):
        for line in value.detail.splitlines():  # the traceback, then what it means
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"perfgate: internal error: {value}")
        return
    if isinstance(value, PerfgateError):
        terminalreporter.write_line(f"perfgate: error: {value}")
        return
    for line in render_terminal_summary(value, config.stash.get(FINISH_ERROR, None)):
        terminalreporter.write_line(line)
