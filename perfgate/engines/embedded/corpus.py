"""The training corpus: the docstrings of the Python standard library, as UTF-8 bytes.

Every Python install carries it, so training needs no download; it differs between Python
versions, so the shipped weights record the version and the digest of the corpus they were
trained on (``training.json`` beside them). The walk is deterministic: files in sorted order,
docstrings in ``ast.walk`` order, tests and third-party packages left out.

Docstrings are split by a hash of their own text, not by position, so a docstring added or
removed by another Python version moves no other docstring between the splits.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import hashlib
import platform
import sysconfig
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SKIPPED_DIRS = frozenset(
    {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"}
    | {"turtledemo", "lib2to3", "ensurepip"}
)
SEPARATOR = b"\n\n"
FINETUNE_BUCKET = 0  # 1 docstring in SPLIT_BUCKETS goes to the fine-tuning subset...
EVAL_BUCKET = 1  # ...and 1 in SPLIT_BUCKETS is held out for evaluation
SPLIT_BUCKETS = 20
NODES_WITH_DOCSTRINGS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)  # every other node: none


@dataclass(frozen=True)
class Corpus:
    """The stdlib docstrings of one Python install, split three ways."""

    python_version: str
    docstrings: tuple[bytes, ...]

    @functools.cached_property
    def text(self) -> bytes:
        """Every docstring, separated by a blank line."""
        return SEPARATOR.join(self.docstrings)

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.text).hexdigest()

    def split(self, bucket: int | None) -> bytes:
        """Return the docstrings of one bucket (None: every bucket but the eval bucket)."""
        if bucket is None:
            chosen = [d for d in self.docstrings if _bucket(d) != EVAL_BUCKET]
        else:
            chosen = [d for d in self.docstrings if _bucket(d) == bucket]
        return SEPARATOR.join(chosen)


def _bucket(docstring: bytes) -> int:
    return int.from_bytes(hashlib.sha256(docstring).digest()[:4], "big") % SPLIT_BUCKETS


def stdlib_root() -> Path:
    """Return the directory of this interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def iter_docstrings(root: Path) -> Iterator[str]:
    """Yield the docstrings of the modules under root, in a deterministic order."""
    files = sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix())
    for path in files:
        if SKIPPED_DIRS.intersection(path.relative_to(root).parts):
            continue
        # Parsing makes objects by the million, each tree freed as it is dropped (it holds no
        # cycle): with the collector on, they set off its passes over the whole heap, which in
        # a process that has imported torch doubled the corpus's CPU time (4.97 s, 2.35 s off).
        with _collector_paused():
            found = _docstrings(path)
        yield from found


def _docstrings(path: Path) -> Sequence[str]:
    """The docstrings of one module, in ``ast.walk`` order (none where it does not parse)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):  # a file for another Python version, say
        return ()
    nodes = (node for node in _walk_statements(tree) if isinstance(node, NODES_WITH_DOCSTRINGS))
    return [docstring for node in nodes if (docstring := ast.get_docstring(node))]


def _walk_statements(tree: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` over the nodes that can hold statements, in its order.

    An expression holds no statement (a lambda's body is an expression), so leaving out the
    expressions' subtrees leaves every node a docstring sits on at its depth and in its order
    among them: the same docstrings, in the same order, at a third of ``ast.walk``'s cost.
    """
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(
            child for child in ast.iter_child_nodes(node) if isinstance(child, HOLDS_STATEMENTS)
        )
        yield node


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def load_corpus() -> Corpus:
    """Build the corpus from this interpreter's standard library (a few seconds, then cached)."""
    docstrings = tuple(d.encode("utf-8") for d in iter_docstrings(stdlib_root()))
    return Corpus(platform.python_version(), docstrings)
