"""`perfgate ARGS` run inside the test's process: what `run_perfgate` gives, without the
interpreter's start and the imports each fresh process pays for.

For the commands whose process boundary is not what a test checks; signals, `perfgate run`
(it becomes pytest) and the console script itself keep `run_perfgate`.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from perfgate.cli import main

UNSET = ("PERFGATE_DB_URL", "PERFGATE_PROFILE")  # as run_perfgate: the test's own environment


def perfgate_main(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `perfgate ARGS` in folder `cwd` with `env` added to the environment."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env or {}),
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as done:  # argparse: --help, --version, a bad flag
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    return subprocess.CompletedProcess(["perfgate", *args], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(added: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    for name in UNSET:
        os.environ.pop(name, None)
    os.environ.update(added)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
