"""One door to the GPUs: NVML where it works, nvidia-smi otherwise, the same report from
both, the machine's identity read once per process, and nothing at all without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate import devices
from perfgate.config import load_config
from perfgate.devices import (
    ComputeApp,
    FakeReader,
    Gpu,
    detect_gpus,
    read_gpus,
    reset_cache,
    use_reader,
)
from perfgate.engines.gpu_memory import GpuWatch, check_gpus_for, query_gpus
from perfgate.errors import ConfigError, InfrastructureError
from perfgate.fingerprint import collect_fingerprint
from perfgate.hardware import GpuInfo, machine_id
from perfgate.runner.gpu_health import fingerprint_fields

from . import fake_nvml, fake_smi
from .conftest import write_config

# Two H200s, the second with its power limit lowered, and a process on the first.
ROWS = fake_smi.gpus(2, **{"1": {"power.limit": "500.00"}})
APPS = [{"pid": "4242", "gpu_uuid": "GPU-00000000-fake", "used_memory": "40900"}]
# The fingerprint the code before `perfgate.devices` gave such a machine (nvidia-smi read
# three ways), on an embedded scenario whose server reported version 0.1 and torch 2.0.
H200X2_FINGERPRINT = {
    "cuda": "12.8",
    "draft": "perfgate/eagle3-llama-tiny",
    "driver": "580.159.04",
    "engine": "embedded",
    "engine_version": "0.1",
    "gpu": "NVIDIA H200",
    "gpu_count": "2",
    "model": "perfgate/llama-tiny",
    "torch": "2.0",
}
# ... and, since, the machine: its GPUs' UUIDs digested (NVML reads the same).
H200X2_MACHINE = {"machine": machine_id([row["uuid"] for row in ROWS])}
H200X2_SETTINGS = {
    "driver": "580.159.04",
    "gpu_app_clock_mhz": "1785",
    "gpu_persistence_mode": "Enabled",
    "gpu_power_limit_w": "700,500",
    "gpu_sm_clock_max_mhz": "1980",
}


def _smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    """A stand-in nvidia-smi on PATH (no NVML); returns its state file."""
    for name, value in fake_smi.install(tmp_path / "bin", rows, apps=APPS).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(devices.READER_VARIABLE)  # the door is chosen as on a real machine
    fake_nvml.install(monkeypatch, None)
    return tmp_path / "bin" / "nvidia-smi.json"


def _queries(state: Path) -> list[str]:
    calls = fake_smi.calls_log(state)
    return calls.read_text().splitlines() if calls.exists() else []


def _fingerprint(tmp_path: Path, gpus: GpuInfo | None) -> dict[str, str]:
    scenario = load_config(write_config(tmp_path)).scenarios["tiny"]
    server = {"version": "0.1", "torch_version": "2.0"}
    printed = collect_fingerprint(scenario, server, gpus, environ={})
    return {k: v for k, v in printed.items() if k not in ("perfgate", "scenario")}


def test_nvidia_smi_gives_the_fingerprint_it_gave_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _smi(monkeypatch, tmp_path, ROWS)
    assert _fingerprint(tmp_path, detect_gpus()) == H200X2_FINGERPRINT | H200X2_MACHINE
    report = read_gpus()
    assert report is not None and report.source == "nvidia-smi"
    assert fingerprint_fields(report.gpus) == H200X2_SETTINGS
    assert report.apps == (ComputeApp(4242, "GPU-00000000-fake", 40900.0),)


def test_nvml_reads_the_machine_nvidia_smi_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _smi(monkeypatch, tmp_path, ROWS)
    through_smi = read_gpus()
    fake_nvml.install(monkeypatch, fake_nvml.module(ROWS, APPS))
    reset_cache()
    through_nvml = read_gpus()
    assert through_nvml is not None and through_nvml.source == "NVML"
    assert through_nvml == through_smi  # every field of every GPU, and the processes
    assert _fingerprint(tmp_path, detect_gpus()) == H200X2_FINGERPRINT | H200X2_MACHINE
    assert fingerprint_fields(through_nvml.gpus) == H200X2_SETTINGS


def test_nvml_is_asked_once_per_process_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started = []
    fake = fake_nvml.module(ROWS)
    fake.nvmlInit = lambda: started.append(1)  # type: ignore[attr-defined]
    fake_nvml.install(monkeypatch, fake)
    monkeypatch.delenv(devices.READER_VARIABLE, raising=False)
    read_gpus()
    read_gpus()
    assert started == [1]


def test_nvml_that_cannot_start_falls_back_to_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = _smi(monkeypatch, tmp_path, ROWS)
    broken = fake_nvml.module(ROWS, init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED)
    fake_nvml.install(monkeypatch, broken)
    report = read_gpus()
    assert report is not None and report.source == "nvidia-smi" and len(report.gpus) == 2
    assert _queries(state)


def test_the_reader_can_be_chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _smi(monkeypatch, tmp_path, ROWS)
    fake_nvml.install(monkeypatch, fake_nvml.module(ROWS))
    monkeypatch.setenv(devices.READER_VARIABLE, "nvidia-smi")
    assert (read_gpus() or pytest.fail()).source == "nvidia-smi"
    monkeypatch.setenv(devices.READER_VARIABLE, "nvml")
    assert (read_gpus() or pytest.fail()).source == "NVML"
    monkeypatch.setenv(devices.READER_VARIABLE, "smi")
    with pytest.raises(ConfigError) as error:
        read_gpus()
    assert str(error.value) == (
        "PERFGATE_GPU_READER: 'smi' is not a way to read the GPUs; "
        "set it to auto, nvml, nvidia-smi, or unset it"
    )


def test_nvml_asked_for_but_missing_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _smi(monkeypatch, tmp_path, ROWS)
    monkeypatch.setenv(devices.READER_VARIABLE, "nvml")
    with pytest.raises(ConfigError) as error:
        read_gpus()
    assert str(error.value) == (
        "PERFGATE_GPU_READER: asks for NVML, which cannot be used here: pynvml (the "
        "nvidia-ml-py package) is not installed; install nvidia-ml-py beside perfgate, or "
        "set it to nvidia-smi"
    )
    broken = fake_nvml.module(ROWS, init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED)
    fake_nvml.install(monkeypatch, broken)
    reset_cache()
    with pytest.raises(ConfigError, match="nvmlInit failed: Driver Not Loaded"):
        read_gpus()


def test_nvml_fields_a_gpu_or_binding_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml.module(
        fake_smi.gpus(1, **{"0": {"utilization.gpu": "[N/A]"}}),
        lacking=["nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksEventReasons"],
        failing={"nvmlDeviceGetApplicationsClock": fake_nvml.NVML_ERROR_FUNCTION_NOT_FOUND},
    )
    fake_nvml.install(monkeypatch, fake)
    report = read_gpus()
    assert report is not None
    (gpu,) = report.gpus
    assert gpu.utilization_pct is None  # the GPU does not say: [N/A]
    assert gpu.event_reasons == 1  # through the older name of the same bitmask
    assert gpu.remapped_rows_pending is None and gpu.app_clock_mhz is None
    assert report.not_queried == (
        "remapped_rows.pending",
        "remapped_rows.failure",
        "clocks.applications.graphics",
    )


def test_nvml_without_the_v2_memory_query(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml.module(fake_smi.gpus(1))
    del fake.nvmlMemory_v2  # a binding older than it: v1 counts the reserved memory as used
    fake_nvml.install(monkeypatch, fake)
    gpus = query_gpus()
    assert gpus is not None and gpus[0].memory_used_mib == 1 + fake_nvml.RESERVED_MIB


def test_a_gpu_lost_while_read_is_an_infrastructure_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing = {"nvmlDeviceGetMaxClockInfo": fake_nvml.NVML_ERROR_GPU_IS_LOST}
    fake_nvml.install(monkeypatch, fake_nvml.module(fake_smi.gpus(1), failing=failing))
    with pytest.raises(InfrastructureError, match=r"^NVML failed: error 15; `nvidia-smi` shows"):
        read_gpus()
    assert detect_gpus() is None  # the fingerprint says "none", as with a failing nvidia-smi


def test_the_machine_is_read_once_what_it_does_every_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = _smi(monkeypatch, tmp_path, ROWS)
    first = detect_gpus()
    assert first == GpuInfo("NVIDIA H200", "580.159.04", "12.8", 2, H200X2_MACHINE["machine"])
    assert detect_gpus() is first
    queries = [q for q in _queries(state) if q.startswith("--query-gpu")]
    assert len(queries) == 1 and len(_queries(state)) == 2  # the query, and the CUDA header
    fake_smi.update(state, fake_smi.gpus(2, **{"0": {"memory.used": "9000"}}))
    assert (read_gpus() or pytest.fail()).gpus[0].memory_used_mib == 9000.0
    assert (read_gpus(apps=False) or pytest.fail()).apps == ()
    assert len([q for q in _queries(state) if q.startswith("--query-gpu")]) == 3
    fake_smi.update(state, fake_smi.gpus(4))
    assert detect_gpus() is first  # the count is a fact of the machine, not re-read
    reset_cache()
    assert (detect_gpus() or pytest.fail()).count == 4


def test_no_gpu_at_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(devices.READER_VARIABLE, raising=False)
    fake_nvml.install(monkeypatch, None)
    assert read_gpus() is None and detect_gpus() is None and query_gpus() is None
    fake_nvml.install(monkeypatch, fake_nvml.module([]))  # a driver, and no GPU on it
    reset_cache()
    assert read_gpus() == devices.GpuReport(()) and detect_gpus() is None


def test_a_broken_nvidia_smi_leaves_the_fingerprint_without_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = _smi(monkeypatch, tmp_path, ROWS)
    fake_smi.update(state, [], broken=True)
    assert detect_gpus() is None
    with pytest.raises(InfrastructureError, match=r"nvidia-smi failed \(code 9\): NVIDIA-SMI"):
        read_gpus()


def test_an_nvidia_smi_row_perfgate_cannot_read_is_quoted_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    line = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"  # what `nvidia-smi -L` prints
    _smi(monkeypatch, tmp_path, fake_smi.gpus(1, **{"0": {"index": line}}))
    with pytest.raises(InfrastructureError) as raised:
        read_gpus()
    said = str(raised.value)
    assert said.startswith("nvidia-smi --query-gpu gave a row perfgate cannot read (invalid")
    # The row quoted as nvidia-smi printed it, then the fields it was asked for.
    assert f"): '{line}, GPU-00000000-fake, NVIDIA H200, 580.159.04, 1, 143771, " in said
    assert "; expected 18 comma-separated fields: index,uuid,name,driver_version," in said
    assert detect_gpus() is None  # as where the driver does not answer


def _gpu(index: int, used_mib: float) -> Gpu:
    return Gpu(index, f"GPU-{index}", "NVIDIA H200", "580.159.04", used_mib, 143771.0)


def test_a_fake_reader_stands_for_the_machine_in_process() -> None:
    fake = FakeReader([_gpu(0, 500.0), _gpu(1, 500.0)], cuda="12.9")
    with use_reader(fake):
        machine = machine_id(["GPU-1", "GPU-0"])  # the UUIDs, in any order
        assert detect_gpus() == GpuInfo("NVIDIA H200", "580.159.04", "12.9", 2, machine)
        assert len(check_gpus_for(2, {}, "scenarios.x.tp", query_gpus())) == 2
        watch = GpuWatch.snapshot(fake.gpus[:1])
        fake.gpus[0] = _gpu(0, 90000.0)  # the server holds its memory
        with pytest.raises(InfrastructureError, match=r"GPU 0 still uses 87\.9 GiB"):
            watch.wait_released("the spec server", timeout_s=0, poll_s=0)
        fake.gpus[0] = _gpu(0, 600.0)  # ... and frees it, within the slack
        watch.wait_released("the spec server", timeout_s=0, poll_s=0)
        assert fake.reads == 5
        with use_reader(None):  # a machine without GPUs
            assert read_gpus() is None and detect_gpus() is None
        assert (detect_gpus() or pytest.fail()).count == 2
