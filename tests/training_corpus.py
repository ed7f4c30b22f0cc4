"""The training corpus (the stdlib's docstrings), built once for a whole test session.

Building it parses every module of the standard library: 2-4 CPU s in each process that trains.
The first worker to need it builds it (``load_corpus``, so that worker's own later calls find it
cached) and writes it beside the workers' temporary folders; the others read it there. The
tests that train take it from here; `test_the_corpus_is_built_deterministically` builds it a
second time on its own and compares.
"""

from __future__ import annotations

import pickle

import pytest

from perfgate.engines.embedded.corpus import Corpus, load_corpus

from .session_once import session_lock


def shared_corpus(config: pytest.Config, factory: pytest.TempPathFactory) -> Corpus:
    """The session's corpus, built here unless a worker built it already (call it from a
    session fixture: each call reads the file again)."""
    with session_lock(config, factory, "training-corpus") as root:
        saved = root / "training-corpus.pickle"
        if not saved.exists():
            corpus = load_corpus()
            written = saved.with_suffix(".partial")  # whole or absent, should this fail
            written.write_bytes(pickle.dumps(Corpus(corpus.python_version, corpus.docstrings)))
            written.replace(saved)
            return corpus
    found: Corpus = pickle.loads(saved.read_bytes())
    return found
