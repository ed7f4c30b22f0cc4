"""GPUs read through a stand-in nvidia-smi: which ones a server gets, refused when busy, waited for release."""

from __future__ import annotations

import threading
import time

import pytest

from perfgate.devices import visible_gpus
from perfgate.engines.gpu_memory import GpuWatch, check_gpus_for, query_gpus
from perfgate.errors import ConfigError, InfrastructureError

from .conftest import SetGpus

WHERE = "scenarios.tp8.env.CUDA_VISIBLE_DEVICES"


def test_cuda_visible_devices_by_index_or_uuid_prefix(fake_gpus: SetGpus) -> None:
    gpus = query_gpus()
    assert gpus is not None and len(gpus) == 8
    assert [g.index for g in visible_gpus(gpus, "3,1")] == [3, 1]
    assert [g.index for g in visible_gpus(gpus, "GPU-05")] == [5]
    assert len(visible_gpus(gpus, None)) == 8
    with pytest.raises(ConfigError, match=r"names GPU '9', which this machine does not have"):
        visible_gpus(gpus, "0,9", WHERE)


def test_tp_needs_as_many_gpus(fake_gpus: SetGpus) -> None:
    gpus = query_gpus()
    assert len(check_gpus_for(8, {}, WHERE, gpus)) == 8
    with pytest.raises(
        ConfigError, match=r"CUDA_VISIBLE_DEVICES: lists 4 GPU\(s\) \(0,1,2,3\), but tp = 8"
    ):
        check_gpus_for(8, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, WHERE, gpus)
    fake_gpus(2)
    with pytest.raises(InfrastructureError, match="shows 2 GPU"):
        check_gpus_for(8, {}, WHERE, query_gpus())
    with pytest.raises(InfrastructureError, match="no GPU is visible: nvidia-smi"):
        check_gpus_for(1, {}, WHERE, None)


def test_a_busy_gpu_is_refused(fake_gpus: SetGpus) -> None:
    fake_gpus(8, used_mib=[500.0] * 7 + [90000.0])
    with pytest.raises(
        InfrastructureError, match=r"GPU 7 \(NVIDIA H200\) already has 87.9 of 140.4 GiB in use"
    ):
        check_gpus_for(8, {}, WHERE, query_gpus())
    assert len(check_gpus_for(4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, WHERE, query_gpus())) == 4


def test_a_broken_driver_is_an_infrastructure_error(fake_gpus: SetGpus) -> None:
    fake_gpus("broken")
    with pytest.raises(
        InfrastructureError, match="nvidia-smi failed \\(code 9\\): NVIDIA-SMI has failed"
    ):
        query_gpus()


def test_waits_until_memory_is_back(fake_gpus: SetGpus) -> None:
    gpus = query_gpus()
    assert gpus is not None
    watch = GpuWatch.snapshot(gpus[:2])
    fake_gpus(8, used_mib=120000.0)  # the server holds its memory
    threading.Timer(0.3, fake_gpus, args=(8,)).start()  # ... and frees it
    started = time.monotonic()
    watch.wait_released("the spec server", timeout_s=10, poll_s=0.05)
    assert time.monotonic() - started >= 0.25


def test_memory_never_released_is_a_clear_error(fake_gpus: SetGpus) -> None:
    watch = GpuWatch.snapshot((query_gpus() or [])[:1])
    fake_gpus(8, used_mib=120000.0)
    with pytest.raises(
        InfrastructureError,
        match=r"of the spec server was not released within 0 s: GPU 0 still uses 117.2 GiB \(0.5 GiB before it started\)",
    ):
        watch.wait_released("the spec server", timeout_s=0.2, poll_s=0.05)


def test_no_nvidia_smi_means_nothing_to_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert query_gpus() is None
    GpuWatch.snapshot([]).wait_released("x", timeout_s=0)
