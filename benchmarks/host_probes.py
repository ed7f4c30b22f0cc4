"""Where a process runs and how fast its host side is: the suspects of a launch's speed state.

Used by benchmarks/launch_states.py in each fresh launch. Each probe measures or reads one
candidate source of the between-launch spread of a server's loop, and gives None where this
machine cannot tell (no GPU, no NUMA information, no cpufreq):

- placement: the CPU the process runs on, the CPUs it may use, that CPU's NUMA node and the
  GPU's (``/sys/bus/pci/devices/<bus id>/numa_node``, -1 where the platform does not say),
  and the CPUs local to the GPU;
- the CPU's clock (``scaling_cur_freq``, or ``cpu MHz`` of /proc/cpuinfo);
- the host's speed at a fixed piece of Python (the interpreter's loop: the embedded server's
  host work is Python and small tensor calls);
- the launch path: an empty kernel's launch, and a launch with a sync, as the server's loop
  pays once a step;
- the allocator: where the CUDA caching allocator placed a fresh block, within a 2 MiB page.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

SYS = Path("/sys")


def current_cpu() -> int | None:
    """The CPU this process last ran on (field 39 of /proc/self/stat), None elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[36])


def cpu_node(cpu: int | None) -> int | None:
    """The NUMA node of ``cpu`` (its ``nodeN`` link in sysfs), None where sysfs has none."""
    if cpu is None:
        return None
    nodes = sorted((SYS / f"devices/system/cpu/cpu{cpu}").glob("node[0-9]*"))
    return int(nodes[0].name[4:]) if nodes else None


def cpu_mhz(cpu: int | None) -> float | None:
    """The clock of ``cpu`` now: cpufreq's, else /proc/cpuinfo's, else None."""
    if cpu is None:
        return None
    freq = SYS / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
    try:
        return int(freq.read_text()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        blocks = Path("/proc/cpuinfo").read_text().split("\n\n")
    except OSError:
        return None
    for block in blocks:
        fields = dict(
            (k.strip(), v.strip())
            for k, _, v in (line.partition(":") for line in block.splitlines())
        )
        if fields.get("processor") == str(cpu) and "cpu MHz" in fields:
            return float(fields["cpu MHz"])
    return None


def parse_cpu_list(text: str) -> list[int]:
    """The CPUs of a sysfs list such as ``0-3,8,10-11``.

    >>> parse_cpu_list("0-3,8,10-11")
    [0, 1, 2, 3, 8, 10, 11]
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def gpu_placement(bus_id: str | None) -> dict[str, Any]:
    """The GPU's NUMA node and its local CPUs, from its PCI device in sysfs."""
    if not bus_id:
        return {"gpu_node": None, "gpu_local_cpus": None}
    # nvidia-smi and NVML give 00000000:19:00.0; sysfs names the device 0000:19:00.0.
    domain, _, rest = bus_id.lower().partition(":")
    device = SYS / "bus/pci/devices" / f"{domain[-4:]}:{rest}"
    node = local = None
    try:
        node = int((device / "numa_node").read_text())
        local = parse_cpu_list((device / "local_cpulist").read_text())
    except (OSError, ValueError):
        pass
    return {"gpu_node": node, "gpu_local_cpus": local}


def python_loop_us(rounds: int = 5, n: int = 20_000) -> float:
    """Microseconds of a fixed pure-Python loop (dict and list work), the median of rounds."""
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        table: dict[int, int] = {}
        for i in range(n):
            table[i & 255] = table.get(i & 255, 0) + i
        times.append((time.perf_counter() - began) * 1e6)
    return statistics.median(times)


def cuda_launch_us(torch: Any, n: int = 200) -> dict[str, float] | None:
    """Per launch of a one-element kernel: the enqueue alone, and the enqueue with a sync."""
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    enqueue = (time.perf_counter() - began) / n * 1e6
    torch.cuda.synchronize()
    rounds = []
    for _ in range(n):
        began = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - began) * 1e6)
    return {"launch_us": enqueue, "launch_sync_us": statistics.median(rounds)}


def allocator_offset(torch: Any) -> int | None:
    """Where a fresh 1 MiB block lands within a 2 MiB page (bytes), on CUDA; None elsewhere."""
    if not torch.cuda.is_available():
        return None
    block = torch.empty(2**20, dtype=torch.uint8, device="cuda")
    return int(block.data_ptr() % 2**21)


def aslr_off() -> bool | None:
    """Whether this process runs without address randomisation (/proc/self/personality has
    ADDR_NO_RANDOMIZE); None where the kernel does not say."""
    try:
        return bool(int(Path("/proc/self/personality").read_text(), 16) & 0x0040000)
    except (OSError, ValueError):
        return None


def huge_pages_kb(pid: int | str = "self") -> int | None:
    """How much of a process's anonymous memory transparent huge pages back (kB), where
    /proc/PID/smaps_rollup says; None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_probes(torch: Any, bus_id: str | None) -> dict[str, Any]:
    """Every probe above, for the process calling it."""
    cpu = current_cpu()
    found: dict[str, Any] = {
        "cpu": cpu,
        "allowed_cpus": len(os.sched_getaffinity(0)),
        "cpu_node": cpu_node(cpu),
        "cpu_mhz": cpu_mhz(cpu),
        "python_loop_us": python_loop_us(),
        "threads": len(os.listdir("/proc/self/task")) if Path("/proc/self/task").is_dir() else None,
        "allocator_offset": allocator_offset(torch),
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
        "aslr_off": aslr_off(),
        "anon_huge_pages_kb": huge_pages_kb(),
    }
    found |= gpu_placement(bus_id)
    launch: dict[str, float | None] = {"launch_us": None, "launch_sync_us": None}
    found |= cuda_launch_us(torch) or launch
    return found
