"""A stand-in `nvidia-smi` on PATH, answering from a JSON file the test controls."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

FAKE_NVIDIA_SMI = textwrap.dedent(
    """\
    #!{python}
    import json, sys
    gpus = json.load(open({state!r}))
    if gpus == "broken":
        print("NVIDIA-SMI has failed because it couldn't communicate with the driver", file=sys.stderr)
        sys.exit(9)
    for g in gpus:
        print(f"{{g['index']}}, {{g['uuid']}}, NVIDIA H200, {{g['total']}}, {{g['used']}}")
    """
)

SetGpus = Callable[..., None]


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SetGpus:
    """`set_gpus(count, used_mib=...)`: the machine shows `count` 140 GiB GPUs from now on."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    state = tmp_path / "gpus.json"
    script = folder / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, state=str(state)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

    def write(value: object) -> None:
        # Whole or not at all: the fake nvidia-smi may read while a timer thread writes.
        partial = state.with_suffix(".partial")
        partial.write_text(json.dumps(value))
        os.replace(partial, state)

    def set_gpus(count: int | str, used_mib: float | list[float] = 500.0) -> None:
        if count == "broken":
            write("broken")
            return
        assert isinstance(count, int)
        used = used_mib if isinstance(used_mib, list) else [used_mib] * count
        gpus = [
            {"index": i, "uuid": f"GPU-{i:02d}aa-bb", "total": 143771.0, "used": used[i]}
            for i in range(count)
        ]
        write(gpus)

    set_gpus(8)
    return set_gpus
