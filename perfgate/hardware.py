"""What the machine is, as perfgate names it: its GPUs (`GpuInfo`, which
`perfgate.devices.detect_gpus` reads), its CPU's model, and the runner profile named from them.
No GPU is asked here; the fingerprint and the devices both build on it."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    """The GPUs as the fingerprint names them; `perfgate.devices.detect_gpus` reads them."""

    name: str
    driver: str
    cuda: str
    count: int
    # Which machine: a digest of its GPUs' UUIDs (`machine_id`); "" where they are not known.
    machine: str = ""


def machine_id(gpu_uuids: Iterable[str]) -> str:
    """A machine named by its GPUs: a short digest of their UUIDs, in any order.

    Two machines of one kind (the same GPU model, driver and fingerprint) differ in speed (every
    GPU phase of one H100 ran 1.1% faster than another's: benchmarks/results/
    h200-gate-proof.md, 2026-12-06, fourth lease), so a run names the machine it ran on."""
    blob = ",".join(sorted(gpu_uuids)).encode()
    return "gpus-" + hashlib.sha256(blob).hexdigest()[:12]


def _output(command: list[str]) -> str | None:
    """What `command` prints, or None if it cannot run or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def default_profile(
    gpus: GpuInfo | None, cpu: str | None = None, cpu_count: int | None = None
) -> str:
    """Name the runner profile from the hardware: e.g. `h200x8`, or `cpu-amd-epyc-2c`.

    A baseline file is found by its profile, so the name carries what sets a machine's speed:
    the GPU model and count, or (without a GPU) the CPU model and core count. A baseline then
    never stands for hardware it was not measured on; its fingerprint says the rest.
    """
    if gpus is None:
        count = cpu_count if cpu_count is not None else os.cpu_count() or 0
        return f"cpu-{cpu_slug(cpu if cpu is not None else cpu_model())}-{count}c"
    model = gpus.name.split()[-1].lower()
    return f"{re.sub(r'[^a-z0-9]+', '-', model)}x{gpus.count}"


# Words of CPU model names that say nothing about the model: trademarks, filler, the clock.
_CPU_NOISE = re.compile(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|\bwith\b.*|@.*", re.IGNORECASE)


def cpu_slug(model: str) -> str:
    """A CPU model as a profile name part: `Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz` ->
    `intel-xeon-gold-6338`."""
    words = re.sub(r"[^a-z0-9]+", "-", _CPU_NOISE.sub(" ", model).lower()).strip("-")
    return words[:40].rstrip("-") or "unknown"


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux, sysctl on macOS."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        brand = (_output(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip()
        if brand:
            return brand
    return platform.processor() or platform.machine()
