"""Reading and judging the GPUs through nvidia-smi: idle, busy, unhealthy, older drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.devices import GpuReport, parse_gpu_row, read_gpus, visible_gpus
from perfgate.runner.gpu_health import Limits, find_problems, fingerprint_fields

from .. import fake_smi

FIELDS = ["index", "uuid", "name", "driver_version", "memory.used", "memory.total"]


def test_a_row_reads_units_and_missing_values() -> None:
    fields = [*FIELDS, "utilization.gpu", "clocks_event_reasons.active", "remapped_rows.pending"]
    gpu = parse_gpu_row(
        fields, "2, GPU-abc, NVIDIA H200, 580.1, 4, 143771, [N/A], 0x41, [Not Supported]"
    )
    assert (gpu.index, gpu.uuid, gpu.memory_used_mib) == (2, "GPU-abc", 4.0)
    assert gpu.utilization_pct is None and gpu.remapped_rows_pending is None
    assert gpu.reasons() == ["gpu_idle", "hw_thermal_slowdown"]


def _report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rows: list, **kwargs) -> GpuReport:  # type: ignore[type-arg]
    for name, value in fake_smi.install(tmp_path / "bin", rows, **kwargs).items():
        monkeypatch.setenv(name, value)
    report = read_gpus()
    assert report is not None
    return report


def test_idle_gpus_have_no_problems_and_give_their_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    report = _report(monkeypatch, tmp_path, fake_smi.gpus(8))
    assert len(report.gpus) == 8 and not find_problems(report, Limits())
    assert fingerprint_fields(report.gpus) == {
        "driver": "580.159.04",
        "gpu_app_clock_mhz": "1785",
        "gpu_persistence_mode": "Enabled",
        "gpu_power_limit_w": "700",
        "gpu_sm_clock_max_mhz": "1980",
    }


def test_busy_and_unhealthy_gpus_are_named_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rows = fake_smi.gpus(
        8,
        **{
            "3": {"memory.used": "40960", "utilization.gpu": "97"},
            "5": {
                "clocks_event_reasons.active": "0x0000000000000040",
                "ecc.errors.uncorrected.volatile.total": "2",
            },
            "6": {"remapped_rows.pending": "1", "retired_pages.pending": "Yes"},
        },
    )
    apps = [{"pid": "4242", "gpu_uuid": "GPU-00000003-fake", "used_memory": "40900"}]
    problems = [
        p.describe()
        for p in find_problems(_report(monkeypatch, tmp_path, rows, apps=apps), Limits())
    ]
    assert problems == [
        "GPU 5 (NVIDIA H200) is unhealthy: clocks held down by hw_thermal_slowdown; "
        "2 uncorrected ECC error(s) since the driver loaded",
        "GPU 6 (NVIDIA H200) is unhealthy: 1 row remap(s) pending a GPU reset; page retirement pending a GPU reset",
        "GPU 3 (NVIDIA H200) is busy: 40960 of 143771 MiB in use (an idle GPU shows at most 1024); "
        "97% utilised; held by pid 4242",
    ]


def test_an_older_driver_is_asked_with_its_own_spelling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rows = fake_smi.gpus(2, **{"1": {"clocks_throttle_reasons.active": "0x0000000000000008"}})
    report = _report(
        monkeypatch,
        tmp_path,
        rows,
        rejected=["clocks_event_reasons.active", "clocks.applications.graphics"],
    )
    assert report.not_queried == ("clocks_event_reasons.active", "clocks.applications.graphics")
    assert report.gpus[1].reasons() == ["hw_slowdown"]
    assert report.gpus[0].app_clock_mhz is None


def test_no_nvidia_smi_means_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert read_gpus() is None


def test_cuda_visible_devices_selects_by_index_or_uuid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gpus = _report(monkeypatch, tmp_path, fake_smi.gpus(4)).gpus
    assert [g.index for g in visible_gpus(gpus, "2,GPU-00000000")] == [2, 0]  # CUDA's order
    assert len(visible_gpus(gpus, None)) == 4
    # A health check reports on the GPUs there are: an entry naming none is left out.
    assert [g.index for g in visible_gpus(gpus, "1,7", strict=False)] == [1]
