"""The layering is a test: core <- adapters <- orchestration <- entry points (tests/layers.py)."""

from __future__ import annotations

import pytest

from tests.layers import LAYER_NAMES, core_imports_forbidden, package_graph, read_graph


@pytest.fixture(scope="module")
def graph():
    return read_graph()


def test_every_module_belongs_to_a_layer(graph):
    assert graph.unassigned() == [], "add the new module's prefix to LAYERS in tests/layers.py"


def test_no_module_imports_a_layer_above_its_own(graph):
    upward = [f"{a} ({graph.layer(a)}) -> {b} ({graph.layer(b)})" for a, b in graph.upward()]
    assert upward == [], f"layers, lowest first: {', '.join(LAYER_NAMES)}"


def test_the_core_imports_no_outside_world(graph):
    assert core_imports_forbidden(graph) == []


def test_engines_import_no_command(graph):
    found = [
        (source, target)
        for source, targets in graph.edges.items()
        if source.startswith("perfgate.engines")
        for target in targets
        if target.startswith(("perfgate.commands", "perfgate.cli"))
    ]
    assert found == []


def test_no_import_cycles(graph):
    assert graph.cycles() == []


def test_no_two_packages_import_each_other(graph):
    """Between packages too (engines <-> probe, engines <-> serving, fingerprint <-> runner
    did, through modules that formed no cycle of their own): a package is a unit a reader
    can understand from below."""
    assert package_graph(graph).cycles() == []


def test_the_package_rule_sees_a_cycle_no_module_forms(tmp_path):
    """engines.launch imports probe.reader, and probe.targets imports engines.facts: no
    module imports its own importer, yet the two packages lean on each other."""
    package = tmp_path / "perfgate"
    for folder in ("engines", "probe"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engines" / "launch.py").write_text("from perfgate.probe import reader\n")
    (package / "engines" / "facts.py").write_text("")
    (package / "probe" / "reader.py").write_text("")
    (package / "probe" / "targets.py").write_text("from perfgate.engines.facts import X\n")
    graph = read_graph(package)
    assert graph.cycles() == []
    assert package_graph(graph).cycles() == [["perfgate.engines", "perfgate.probe"]]


def test_the_graph_sees_an_upward_import_and_a_cycle(tmp_path):
    """The reader itself: an adapter importing the CLI, and two modules importing each other."""
    package = tmp_path / "perfgate"
    (package / "store").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "store" / "__init__.py").write_text("from perfgate.cli import main\n")
    (package / "cli.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import perfgate.errors\n"
        "def main():\n    from perfgate import store\n"
    )
    graph = read_graph(package)
    assert graph.upward() == [("perfgate.store", "perfgate.cli")]
    assert graph.cycles() == [["perfgate.cli", "perfgate.store"]]
    assert graph.edges["perfgate.cli"] == {"perfgate.store"}  # TYPE_CHECKING does not count
