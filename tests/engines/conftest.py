"""A stand-in `nvidia-smi` on PATH, answering from a JSON file the test controls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .. import fake_smi

SetGpus = Callable[..., None]


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SetGpus:
    """`set_gpus(count, used_mib=...)`: the machine shows `count` 140 GiB GPUs from now on."""
    for name, value in fake_smi.install(tmp_path / "fake-bin", []).items():
        monkeypatch.setenv(name, value)
    state = tmp_path / "fake-bin" / "nvidia-smi.json"

    def set_gpus(count: int | str, used_mib: float | list[float] = 500.0) -> None:
        if count == "broken":
            fake_smi.update(state, [], broken=True)
            return
        assert isinstance(count, int)
        used = used_mib if isinstance(used_mib, list) else [used_mib] * count
        gpus = [
            {
                "index": str(i),
                "uuid": f"GPU-{i:02d}aa-bb",
                "name": "NVIDIA H200",
                "driver_version": "580.159.04",
                "memory.total": "143771.0",
                "memory.used": str(used[i]),
            }
            for i in range(count)
        ]
        fake_smi.update(state, gpus)

    set_gpus(8)
    return set_gpus
