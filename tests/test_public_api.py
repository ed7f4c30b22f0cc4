"""The public face: `perfgate.__all__` is sorted, complete and importable."""

from __future__ import annotations

import subprocess
import sys

import perfgate


def test_all_is_sorted_and_resolves() -> None:
    assert perfgate.__all__ == sorted(perfgate.__all__)
    for name in perfgate.__all__:
        assert getattr(perfgate, name) is not None


def test_import_stays_light() -> None:
    # `import perfgate` runs inside every probed server process: it must not pull in heavy stacks.
    code = "import sys, perfgate; print(sorted(m for m in ('torch', 'sqlalchemy', 'jinja2', 'httpx') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
