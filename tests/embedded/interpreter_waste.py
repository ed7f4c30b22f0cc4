"""Two costs of Triton's interpreter (3.9) that change nothing it computes or checks, skipped in
the children that run the kernels under it (``interpreted.py``): together about half of their
CPU time.

- The overflow sanitizer (``sanitize_overflow``) computes each integer add, subtract and
  multiply of a kernel a second time, in int64, for a ``device_assert`` that returns at once
  unless the options' ``debug`` is on, which the interpreter's never is: the second result is
  dropped. Off where ``debug`` is off.
- Each call of a ``@triton.jit`` helper from a kernel (``row_rms_scale``, ``softmax_step``,
  Triton's own ``tl.zeros``) patches triton.language for the interpreter again
  (``_patch_lang``: ``inspect.getmembers`` over its modules and classes), though the launch, or
  the launch's first call of a helper from the same module, patched them already and nothing
  undoes that before the launch ends. Once per module per launch here.

Where Triton's internals are not these (another version), ``skip`` changes nothing: the checks
run as before, only slower.

``python -m tests.embedded.interpreter_waste SCRIPT ARG...`` runs SCRIPT as
``python SCRIPT ARG...`` does (its folder first on the path, as ``__main__``), both skipped: a
benchmark script's test under the interpreter (``test_folded_configs_script.py``).
"""

from __future__ import annotations

import dataclasses
import runpy
import sys
from pathlib import Path
from typing import Any

_skipped = False


def skip() -> bool:
    """Skip both in this process (``TRITON_INTERPRET=1`` set before Triton's import); return
    whether they are skipped."""
    global _skipped
    if _skipped:
        return True
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    executor = getattr(interpreter, "GridExecutor", None)
    patch_lang = getattr(interpreter, "_patch_lang", None)
    no_patches = getattr(interpreter, "_LangPatchScope", None)
    known = all(hasattr(options, name) for name in ("debug", "sanitize_overflow"))
    if not (known and dataclasses.is_dataclass(options) and executor and patch_lang and no_patches):
        return False
    if not options.debug:  # its device_assert checks nothing
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    launch = executor.__call__
    patched: list[set[int]] = []  # the modules patched in the launch under way, if any

    def patch_once(fn: Any) -> Any:
        if not patched or id(fn.__globals__) not in patched[-1]:
            scope = patch_lang(fn)
            if patched:
                patched[-1].add(id(fn.__globals__))
            return scope
        return no_patches()  # nothing to restore: the launch restores its own

    def launch_patching_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    interpreter._patch_lang = patch_once
    executor.__call__ = launch_patching_once
    _skipped = True
    return True


def _run_script(argv: list[str]) -> None:
    """Run the script argv[0] with the arguments after it, as ``python`` runs a script."""
    skip()
    sys.argv = argv
    sys.path[0] = str(Path(argv[0]).resolve().parent)
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    _run_script(sys.argv[1:])
