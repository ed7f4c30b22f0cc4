"""The GPUs a server will use: visible, free of other work, and their memory released again.

The GPUs are read through `perfgate.devices` (NVML, or nvidia-smi). Without either (a laptop,
a CPU runner) there is nothing to check or wait for, and every function here says so instead
of failing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfgate.devices import Gpu, listed_devices, read_gpus, visible_gpus
from perfgate.errors import ConfigError, InfrastructureError

BUSY_FRACTION = 0.2  # memory already in use on a GPU a server is about to load onto
RELEASE_SLACK_MIB = 512.0  # what "back to where it was" tolerates (driver, other tenants)
POLL_S = 1.0


def query_gpus(timeout_s: float = 30.0) -> list[Gpu] | None:
    """Every GPU and the memory it uses now, in the driver's order; None where there is no
    way to read them (no NVML, no nvidia-smi)."""
    report = read_gpus(apps=False, timeout_s=timeout_s)
    return None if report is None else list(report.gpus)


def check_gpus_for(
    tp: int,
    environ: Mapping[str, str],
    where: str,
    gpus: Sequence[Gpu] | None,
) -> list[Gpu]:
    """The GPUs a server with tensor parallelism `tp` will load onto; refuse what cannot work.

    `environ` is the server's environment (CUDA_VISIBLE_DEVICES), `where` names the field
    that sets it. A ConfigError when CUDA_VISIBLE_DEVICES lists too few or unknown GPUs, an
    InfrastructureError when the machine has too few, or one is already busy.
    """
    if gpus is None:
        raise InfrastructureError(
            "no GPU is visible: nvidia-smi is not installed or not on PATH; "
            'SGLang needs NVIDIA GPUs (or set the scenario\'s device = "cpu")'
        )
    listed = listed_devices(environ)
    chosen = visible_gpus(gpus, listed, where)
    if len(chosen) < tp and listed is not None:
        raise ConfigError(
            f"lists {len(chosen)} GPU(s) ({listed}), but tp = {tp} needs {tp}",
            field=where,
            fix=f"list {tp} GPUs, or lower tp",
        )
    if len(chosen) < tp:
        raise InfrastructureError(
            f"this machine shows {len(chosen)} GPU(s) but the scenario needs tp = {tp}; "
            "run it on a runner with enough GPUs"
        )
    for gpu in chosen[:tp]:
        if gpu.memory_used_mib > BUSY_FRACTION * gpu.memory_total_mib:
            raise InfrastructureError(
                f"GPU {gpu.index} ({gpu.name}) already has {gpu.memory_used_mib / 1024:.1f} of "
                f"{gpu.memory_total_mib / 1024:.1f} GiB in use: another process holds it "
                "(a server left behind?); `nvidia-smi` shows which, stop it and run again"
            )
    return chosen[:tp]


@dataclass(frozen=True)
class GpuWatch:
    """The memory in use on some GPUs before a server started, to wait for its release."""

    used_before_mib: Mapping[str, float]  # uuid -> MiB

    @classmethod
    def snapshot(cls, gpus: Sequence[Gpu]) -> GpuWatch:
        now = {g.uuid: g for g in query_gpus() or ()}
        return cls({g.uuid: now[g.uuid].memory_used_mib for g in gpus if g.uuid in now})

    def wait_released(self, what: str, timeout_s: float, poll_s: float = POLL_S) -> None:
        """Wait until each GPU uses no more memory than before `what` started (+ slack);
        else raise InfrastructureError naming every GPU that still holds more, and how much."""
        deadline = time.monotonic() + timeout_s
        while True:
            held = self._still_held()
            if not held:
                return
            if time.monotonic() > deadline:
                still = ", ".join(
                    f"GPU {gpu.index} still uses {gpu.memory_used_mib / 1024:.1f} GiB "
                    f"({before / 1024:.1f} GiB before it started)"
                    for gpu, before in held
                )
                raise InfrastructureError(
                    f"the GPU memory of {what} was not released within {timeout_s:.0f} s: "
                    f"{still}; a process of it may be stuck: find it with nvidia-smi and "
                    "stop it"
                )
            time.sleep(poll_s)

    def _still_held(self) -> list[tuple[Gpu, float]]:
        gpus = query_gpus() or []
        return [
            (g, self.used_before_mib[g.uuid])
            for g in gpus
            if g.uuid in self.used_before_mib
            and g.memory_used_mib > self.used_before_mib[g.uuid] + RELEASE_SLACK_MIB
        ]
