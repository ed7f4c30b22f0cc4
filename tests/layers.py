"""perfgate's import graph, read from the source (no import runs), and the layers it must keep.

`python -m tests.layers` prints the modules per layer, every import that goes up a layer and
every cycle; tests/test_layers.py fails on any of them.

A layer may import its own layer and the layers below it, never one above. Imports under
`if TYPE_CHECKING:` are not imports at run time and do not count; an import inside a function
counts (it is a dependency all the same, only a later one).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "perfgate"

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",  # pure: data, statistics, the configuration's schema; no outside world
        (
            "perfgate.errors",
            "perfgate.metrics",
            "perfgate.env_names",
            "perfgate.files",
            "perfgate.results",
            "perfgate.equivalence",
            "perfgate.gate",
            "perfgate.spec",
            "perfgate.prompts",
            "perfgate.context",
            "perfgate.folders",
            "perfgate.progress",
            "perfgate.baselines",
            "perfgate.config",
        ),
    ),
    (
        "adapters",  # one door per outside thing: servers, GPUs, the history, files for CI
        (
            "perfgate.version",
            "perfgate.hardware",
            "perfgate.sglang",
            "perfgate.machine_state",
            "perfgate.devices",
            "perfgate.fingerprint",
            "perfgate.reference",
            "perfgate.plain_reuse",
            "perfgate.selection",
            "perfgate.unrecorded",
            "perfgate.teacher",
            "perfgate.engines",
            "perfgate.preflight",
            "perfgate.probe",
            "perfgate.serving",
            "perfgate.store",
            "perfgate.report",
            "perfgate.runner",
            "perfgate.ci",
            "perfgate.profile",
            "perfgate.sweep",
            "perfgate.bisect",
            "perfgate.plan",
        ),
    ),
    (
        "orchestration",  # measure a scenario pair, judge, record; the policies over it
        (
            "perfgate.pipeline",
            "perfgate.measure",
            "perfgate.measured_verdicts",
            "perfgate.session",
            "perfgate.verdict_text",
            "perfgate.sweep.run",
            "perfgate.bisect.run",
            "perfgate.profile.capture",
            "perfgate.plan.launch",
            "perfgate.plan.run",
        ),
    ),
    (
        "entry",  # what a user starts: the command line, the pytest plugin and its suites
        (
            "perfgate",
            "perfgate.__main__",
            "perfgate.cli",
            "perfgate.commands",
            "perfgate.settings",
            "perfgate.plugin",
            "perfgate.suites",
        ),
    ),
)
LAYER_NAMES = tuple(name for name, _ in LAYERS)

# What the core never imports, at any depth of its own code: the outside world's libraries.
CORE_FORBIDDEN = ("torch", "sqlalchemy", "alembic", "httpx", "numpy", "jinja2", "safetensors")


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: dict[str, set[str]] = field(default_factory=dict)  # module -> perfgate modules
    third_party: dict[str, set[str]] = field(default_factory=dict)  # module -> top names

    def layer(self, module: str) -> str | None:
        best: tuple[int, str] | None = None
        for name, prefixes in LAYERS:
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and (
                    best is None or len(prefix) > best[0]
                ):
                    best = (len(prefix), name)
        return best[1] if best else None

    def unassigned(self) -> list[str]:
        return sorted(m for m in self.modules if self.layer(m) is None)

    def upward(self) -> list[tuple[str, str]]:
        found = []
        for source, targets in sorted(self.edges.items()):
            here = self.layer(source)
            for target in sorted(targets):
                there = self.layer(target)
                if here and there and LAYER_NAMES.index(there) > LAYER_NAMES.index(here):
                    found.append((source, target))
        return found

    def cycles(self) -> list[list[str]]:
        """Strongly connected groups of more than one module (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        groups: list[list[str]] = []

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for nxt in sorted(self.edges.get(node, ())):
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        for node in sorted(self.modules):
            if node not in index:
                visit(node)
        return sorted(groups)


def unit(module: str) -> str:
    """The package a module belongs to, for the package rule: `perfgate.engines.launch` ->
    `perfgate.engines`; a module at the top (`perfgate.pipeline`) is a unit of its own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: Graph) -> Graph:
    """The graph between units: one edge where any module of one imports any of the other."""
    units = Graph({unit(m): path for m, path in graph.modules.items()})
    for source, targets in graph.edges.items():
        for target in targets:
            if unit(source) != unit(target):
                units.edges.setdefault(unit(source), set()).add(unit(target))
    return units


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except what sits under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def read_graph(package: Path = PACKAGE) -> Graph:
    modules = {
        module_name(path, package): path
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts and "boot" not in path.parts
    }
    graph = Graph(modules)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        graph.edges[name], graph.third_party[name] = set(), set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package):
                if target.split(".")[0] == "perfgate":
                    resolved = _resolve(target, modules)
                    # The package itself is the lazy public facade every submodule import runs.
                    if resolved and resolved not in (name, "perfgate"):
                        graph.edges[name].add(resolved)
                else:
                    graph.third_party[name].add(target.split(".")[0])
    return graph


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """What an import statement names: `from a.b import c` is `a.b.c` (resolved later to the
    module `a.b.c` when there is one, else to `a.b`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    return [f"{source}.{alias.name}" for alias in node.names]


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module an imported name lives in: `perfgate.gate.Verdict` -> `perfgate.gate`."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def core_imports_forbidden(graph: Graph) -> list[tuple[str, str]]:
    return sorted(
        (module, lib)
        for module, libs in graph.third_party.items()
        if graph.layer(module) == "core"
        for lib in libs
        if lib in CORE_FORBIDDEN
    )


def report(graph: Graph) -> str:
    lines = ["modules per layer:"]
    for name in LAYER_NAMES:
        count = sum(1 for m in graph.modules if graph.layer(m) == name)
        lines.append(f"  {name:14} {count}")
    unassigned = graph.unassigned()
    lines.append(f"  {'(no layer)':14} {len(unassigned)} {' '.join(unassigned)}".rstrip())
    upward = graph.upward()
    lines.append(f"upward imports: {len(upward)}")
    lines += [f"  {a} ({graph.layer(a)}) -> {b} ({graph.layer(b)})" for a, b in upward]
    forbidden = core_imports_forbidden(graph)
    lines.append(f"core modules importing the outside world: {len(forbidden)}")
    lines += [f"  {a} -> {b}" for a, b in forbidden]
    cycles = graph.cycles()
    lines.append(f"import cycles: {len(cycles)}")
    lines += [f"  {' <-> '.join(group)}" for group in cycles]
    between = package_graph(graph).cycles()
    lines.append(f"cycles between packages: {len(between)}")
    lines += [f"  {' <-> '.join(group)}" for group in between]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(read_graph()))
