"""Each outside input is read in one place: every environment variable perfgate's package reads
by name, and the runner profile's default. A second reader is how two commands come to
disagree about one setting (the history URL was read in three places, the runner profile
worked out in eight, GitHub's variables in four modules)."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "perfgate"
ENV_NAMES = ("environ", "env", "environment")


def _constants(tree: ast.Module) -> dict[str, str]:
    """A module's top-level NAME = "STRING" assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _name(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _is_environment(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id in ENV_NAMES


def environment_reads(source: str) -> list[tuple[str, int]]:
    """(variable, line) of each read: `environ.get(NAME)`, `os.getenv(NAME)`,
    `environ[NAME]`, and an `Option(..., env=NAME)` whose default the variable supplies."""
    return _environment_reads(ast.parse(source))


def _environment_reads(tree: ast.Module) -> list[tuple[str, int]]:
    constants = _constants(tree)
    reads = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            reader = node.func
            if (reader.attr in ("get", "pop") and _is_environment(reader.value)) or (
                reader.attr == "getenv"
            ):
                name = _name(node.args[0], constants)
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "env":
                    name = _name(keyword.value, constants) or name
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environment(node.value)
        ):
            name = _name(node.slice, constants)
        if name and name.isupper():
            reads.append((name, node.lineno))
    return reads


@dataclass(frozen=True)
class _Module:
    """A package module, parsed once for every scan of this file: its calls, as
    (`name` of `name(...)` or None, `attr` of `something.attr(...)` or "", line)."""

    path: Path
    tree: ast.Module
    functions: list[tuple[int, int, str]]  # (first line, last line, name), in ast.walk order
    calls: list[tuple[str | None, str, int]]


@functools.cache
def _parsed(package: Path) -> tuple[_Module, ...]:
    """The package's modules (cached: parsing and walking the package is most of each scan)."""
    modules = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        nodes = list(ast.walk(tree))
        functions = [(n.lineno, n.end_lineno or n.lineno, n.name) for n in nodes
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]  # fmt: skip
        calls = [
            (getattr(n.func, "id", None), getattr(n.func, "attr", ""), n.lineno)
            for n in nodes
            if isinstance(n, ast.Call)
        ]
        modules.append(_Module(path, tree, functions, calls))
    return tuple(modules)


def _reads_by_variable() -> dict[str, list[str]]:
    """variable -> the places that read it: a place is a top-level function or class of a
    module (`model_cache_root` tests its variable, then reads it: one place), or the module's
    own top level."""
    where: dict[str, list[str]] = defaultdict(list)
    for module in _parsed(PACKAGE):
        path, tree = module.path, module.tree
        spans = [
            (n.lineno, n.end_lineno or n.lineno, n.name) for n in tree.body if hasattr(n, "name")
        ]
        for name, line in _environment_reads(tree):
            owner = next((f for start, end, f in spans if start <= line <= end), "<module>")
            place = f"{path.relative_to(REPO)}:{owner}"
            if place not in where[name]:
                where[name].append(place)
    return where


def test_every_environment_variable_is_read_in_one_place() -> None:
    where = _reads_by_variable()
    assert {"PERFGATE_DB_URL", "PERFGATE_PROFILE", "GITHUB_REPOSITORY"} <= set(where)
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice
    assert where["PERFGATE_DB_URL"] == ["perfgate/settings.py:<module>"]  # OPTIONS
    job = ("SHA", "HEAD_REF", "REF_NAME", "REF", "RUN_ID", "REPOSITORY", "SERVER_URL")
    for variable in (f"GITHUB_{name}" for name in job):  # the job's identity: context.GitHubRun
        assert where[variable] == ["perfgate/context.py:github_run"], variable


def test_the_counter_sees_a_second_reader() -> None:
    """The scan finds each form a reader takes, a module constant's name included."""
    source = (
        "import os\n"
        'VAR = "PERFGATE_DB_URL"\n'
        "a = os.environ.get(VAR)\n"
        'b = os.getenv("GITHUB_SHA")\n'
        'c = environ["GITHUB_RUN_ID"]\n'
        'd = Option("db", "help", env="PERFGATE_PROFILE")\n'
        'e = {"NOT_A_READ": 1}.get("NOT_A_READ")\n'
    )
    assert sorted(environment_reads(source)) == [
        ("GITHUB_RUN_ID", 5),
        ("GITHUB_SHA", 4),
        ("PERFGATE_DB_URL", 3),
        ("PERFGATE_PROFILE", 6),
    ]


def callers(name: str, *, method: bool = False) -> list[str]:
    """`file:function` of every call of `name` in the package, as `name(...)` or
    `something.name(...)` (with `method`, only the latter)."""
    found = []
    for module in _parsed(PACKAGE):
        for function, attr, line in module.calls:
            called = attr if method else function or attr
            if called == name:
                inner = [f for a, b, f in module.functions if a <= line <= b]
                owner = inner[-1] if inner else "<module>"
                found.append(f"{module.path.relative_to(REPO)}:{owner}")
    return found


def test_the_runner_profile_is_worked_out_in_one_place() -> None:
    """`default_profile` (the name from the hardware) is called by `runner_profile` alone,
    which every command asks; none checks or defaults --profile on its own."""
    assert callers("default_profile") == ["perfgate/devices.py:runner_profile"]


def test_the_engine_override_is_applied_in_one_place() -> None:
    """--engine reaches a scenario through `Config.select` alone; the seven commands that
    each applied it themselves now ask there."""
    assert callers("with_engine") == ["perfgate/config.py:select"]


def test_a_servers_command_line_is_built_in_one_place() -> None:
    """Probe variables, then the server's command line: `engines.launch.probed_command` alone
    (the gate's measuring, the teacher's server, a profile and `perfgate servers` each built
    them themselves)."""
    assert callers("probe_env") == ["perfgate/engines/launch.py:probed_command"]
    assert callers("server_command") == ["perfgate/engines/launch.py:probed_command"]


def test_what_a_command_measures_is_chosen_in_one_place() -> None:
    """The config's scenarios (`Config.select`, on --engine), the runner profile and the
    history's write check: `selection.selection_from` alone, which run, gate, sweep, plan,
    bisect, profile, servers, doctor and ci ask (each had its own copy, some checking less).
    The doctor lists every scenario besides, for the fix of a GPU scenario on a machine
    without one; `perfgate baseline show` names the profile of a baseline file it reads."""
    assert callers("select", method=True) == [
        "perfgate/runner/doctor.py:_no_gpu",
        "perfgate/selection.py:selection_from",
    ]
    assert callers("runner_profile") == [
        "perfgate/commands/baseline.py:handle_show",
        "perfgate/selection.py:profile",
        "perfgate/selection.py:selection_from",
    ]
    # The doctor writes nothing: it reports the history's write check as a check of its own.
    assert callers("probe_write") == [
        "perfgate/runner/doctor.py:check_history_db",
        "perfgate/selection.py:selection_from",
    ]


def test_the_caller_finder_sees_a_second_selection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that chose its scenarios itself again would be found, by its function."""
    import tests.test_one_reading as reading

    folder = tmp_path / "perfgate" / "commands"
    folder.mkdir(parents=True)
    (folder / "new.py").write_text(
        "from sqlalchemy import select\n"
        "def run(settings):\n"
        "    config = load_config(settings.config)\n"
        "    query = select(1)\n"
        "    return config.select(settings.scenarios, settings.engine)\n"
    )
    monkeypatch.setattr(reading, "PACKAGE", tmp_path / "perfgate")
    monkeypatch.setattr(reading, "REPO", tmp_path)
    assert callers("select", method=True) == ["perfgate/commands/new.py:run"]
    assert callers("select") == ["perfgate/commands/new.py:run"] * 2  # SQLAlchemy's too
