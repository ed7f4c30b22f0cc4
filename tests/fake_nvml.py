"""A stand-in for NVIDIA's `pynvml` module (nvidia-ml-py), built from fake_smi's rows.

It has only what perfgate.devices calls, with nvidia-ml-py 13's names, constants, argument
order and units (its pynvml.py): memory in bytes, power in milliwatts, clocks in MHz, UUIDs
as bytes, other strings as str. Answers depend on the constants passed, so a reader that asks
for the wrong clock or counter gets the wrong number. The same rows through fake_smi and
through this module describe one machine.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

MIB = 1 << 20
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_FUNCTION_NOT_FOUND = 13
RESERVED_MIB = 500  # what the driver keeps for itself: in v1's `used`, apart in v2


def _bytes(mib_text: str) -> int:
    """MiB as shown by nvidia-smi, as NVML's bytes: a fraction under it (nvidia-smi rounds up)."""
    return max(0, int(float(mib_text)) * MIB - MIB // 5)


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 9: "Driver Not Loaded", 13: "Function Not Found"}.get(
            self.value, f"error {self.value}"
        )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class _Machine:
    """The functions of the module, over rows of nvidia-smi fields."""

    def __init__(self, rows: Sequence[Mapping[str, str]], apps: Sequence[Mapping[str, str]]):
        self.rows = [dict(row) for row in rows]
        self.apps = apps

    def field(self, handle: int, name: str) -> str:
        value = self.rows[handle].get(name, "[N/A]")
        if value.startswith("["):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    def memory(self, handle: int, version: int | None = None) -> SimpleNamespace:
        used = _bytes(self.field(handle, "memory.used"))
        total = int(float(self.field(handle, "memory.total"))) * MIB
        if version is None:  # v1: what the driver reserves counts as used
            used += RESERVED_MIB * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def clock(self, handle: int, kind: int, prefix: str) -> int:
        # NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1; the graphics clock reads 1 MHz apart.
        name = {"current": "clocks.sm", "max": "clocks.max.sm"}[prefix]
        return int(float(self.field(handle, name))) + (1 if kind == 0 else 0)

    def ecc(self, handle: int, error_type: int, counter_type: int) -> int:
        count = int(float(self.field(handle, "ecc.errors.uncorrected.volatile.total")))
        # Uncorrected (1), volatile (0); any other pair reads a different counter.
        return count if (error_type, counter_type) == (1, 0) else count + 1000

    def remapped_rows(self, handle: int) -> tuple[int, int, int, int]:
        pending = self.field(handle, "remapped_rows.pending")
        failure = self.field(handle, "remapped_rows.failure")
        return (0, 0, int(float(pending)), int(failure.lower() in ("yes", "1")))

    def processes(self, handle: int) -> list[SimpleNamespace]:
        uuid = self.rows[handle]["uuid"]
        return [
            SimpleNamespace(
                pid=int(app["pid"]),
                usedGpuMemory=_bytes(app["used_memory"])
                if _number(app["used_memory"]) is not None
                else None,
            )
            for app in self.apps
            if app["gpu_uuid"] == uuid
        ]


def module(
    rows: Sequence[Mapping[str, str]],
    apps: Sequence[Mapping[str, str]] = (),
    *,
    cuda: int = 12080,
    init_error: int | None = None,
    lacking: Iterable[str] = (),
    failing: Mapping[str, int] | None = None,
) -> ModuleType:
    """A `pynvml` over `rows`: `lacking` names functions this binding lacks, `failing` maps
    function names to the NVML error code they raise, `init_error` fails nvmlInit."""
    machine = _Machine(rows, apps)
    fake = ModuleType("pynvml")

    def driver_version() -> str:
        return machine.rows[0]["driver_version"] if machine.rows else "580.159.04"

    def init() -> None:
        if init_error is not None:
            raise NVMLError(init_error)

    functions: dict[str, Any] = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": driver_version,
        "nvmlSystemGetCudaDriverVersion": lambda: cuda,
        "nvmlDeviceGetCount": lambda: len(machine.rows),
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetName": lambda h: machine.field(h, "name"),
        "nvmlDeviceGetUUID": lambda h: machine.field(h, "uuid").encode(),
        "nvmlDeviceGetMemoryInfo": machine.memory,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(
            gpu=int(float(machine.field(h, "utilization.gpu"))), memory=0
        ),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: int(
            machine.field(h, "clocks_event_reasons.active"), 16
        ),
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: int(
            machine.field(h, "clocks_event_reasons.active"), 16
        ),
        "nvmlDeviceGetTotalEccErrors": machine.ecc,
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: int(
            machine.field(h, "retired_pages.pending") == "Yes"
        ),
        "nvmlDeviceGetRemappedRows": machine.remapped_rows,
        "nvmlDeviceGetClockInfo": lambda h, kind: machine.clock(h, kind, "current"),
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: machine.clock(h, kind, "max"),
        "nvmlDeviceGetApplicationsClock": lambda h, kind: (
            int(float(machine.field(h, "clocks.applications.graphics"))) + (0 if kind == 0 else 1)
        ),
        "nvmlDeviceGetPowerManagementLimit": lambda h: round(
            float(machine.field(h, "power.limit")) * 1000
        ),
        "nvmlDeviceGetPersistenceMode": lambda h: int(
            machine.field(h, "persistence_mode") == "Enabled"
        ),
        "nvmlDeviceGetTemperature": lambda h, sensor: (
            int(float(machine.field(h, "temperature.gpu"))) + sensor
        ),  # NVML_TEMPERATURE_GPU = 0
        "nvmlDeviceGetComputeRunningProcesses": machine.processes,
    }
    for name, code in (failing or {}).items():
        functions[name] = _raiser(code)
    for name, function in functions.items():
        if name not in set(lacking):
            setattr(fake, name, function)
    constants = {
        "NVMLError": NVMLError,
        "NVML_FEATURE_ENABLED": 1,
        "NVML_TEMPERATURE_GPU": 0,
        "NVML_CLOCK_GRAPHICS": 0,
        "NVML_CLOCK_SM": 1,
        "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
        "NVML_VOLATILE_ECC": 0,
        "nvmlMemory_v2": 0x02000028,
    }
    for name, value in constants.items():
        setattr(fake, name, value)
    fake.machine = machine  # type: ignore[attr-defined]
    return fake


def _raiser(code: int) -> Any:
    def fail(*args: object, **kwargs: object) -> None:
        raise NVMLError(code)

    return fail


def install(monkeypatch: pytest.MonkeyPatch, fake: ModuleType | None) -> None:
    """Make `import pynvml` find `fake`; None makes the import fail, as without the package."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
