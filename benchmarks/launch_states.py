"""Does a fresh process decode at one speed, or do launches fall into groups, and where?

    python benchmarks/launch_states.py --out DIR                       # on a CUDA machine
    python benchmarks/launch_states.py --out DIR --device cpu --model perfgate/llama-tiny \\
        --launches 2 --replays 3 --blocks 2                           # the path, on a CPU

Ten fresh launches of the GPU scenario on an H200 (benchmarks/results/h200-real-weights.md)
put plain decoding in two groups 4% apart: six launches at 476-484 ms for the 8 prompts, four
at 496-504 ms. This tells the two places such a state can live apart. It starts --launches
fresh processes one after another; each builds the target as a server does (seeded weights,
stacked projections, compiled, or eager with --eager, the attention backend the device
defaults to, a CUDA graph per step) and times a plain decode step of batch --batch at
--position two ways:

- ``device``: back-to-back graph replays timed with CUDA events, the GPU's time alone;
- ``served``: each step as the server's loop runs it, its inputs copied in, the graph
  replayed and its tokens read back to the host (the one sync a step), timed by the clock.

and records where it ran and how fast its host was (benchmarks/host_probes.py: the CPU it was
on, the CPUs it may use, their NUMA node and the GPU's, the CPU's clock, a fixed piece of
Python, a kernel's launch with and without a sync, where the allocator put a fresh block), and
through ``perfgate.devices`` the GPU's SM clock, temperature and active clock event reasons
right after timing. If ``device`` falls into groups, the state is the GPU's (clocks,
placement of memory); if only ``served`` does, it is the host's, and the probe that moves with
``served - device`` across launches says where.

Then each launch times a batch's prefill (``prefill_ways``), the one forward a server runs
without a graph, whose time from launch to launch was the H200's spread of tok/s
(benchmarks/results/h200-gate-proof.md, 2026-12-06): as served, as the host's enqueue, and as
the GPU's time alone. Its per-launch table and its spread across launches are in results.md.

``--variants`` runs the launches in turn under each placement, interleaved so that a drift of
the machine falls on all alike: ``as-placed`` (where the OS puts it), ``gpu-local`` (pinned to
the CPUs local to the GPU, the whole set where the platform does not say), ``one-cpu`` (one
of them only), ``hash-seed`` (as placed, with PYTHONHASHSEED=0: the interpreter's layout the
same in every launch), ``fastest-cpus`` (pinned to the quarter of the allowed CPUs where a
fixed piece of Python ran fastest at the launch's start: a machine whose CPUs are not alike
from moment to moment, as a lent slice of a shared host may be), ``no-aslr`` (as placed, at
the same addresses in every launch: ADDR_NO_RANDOMIZE, as `setarch -R`). A variant whose
launches do not scatter is a cure to measure in the server.

``--run-as VARIANT -- COMMAND...`` runs a command (a whole `perfgate run`) placed as that
variant places a launch, so that a cure the launches point to can be measured in the server
(benchmarks/gpu_gate_proof.sh's CURE).

Writes results.json and results.md: a row per launch, each way's spread across launches
(CV) against its spread within a launch (the median over launches of its blocks' CV), the
spread per variant, and how each probe moves with ``served - device`` (Pearson's r).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from argv import without_flag
from decode_bandwidth import Timer, write_results
from host_probes import gpu_placement, host_probes, python_loop_us
from launch_noise import cv
from torch import Tensor

from perfgate.devices import read_gpus
from perfgate.engines.embedded import triton_attention
from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import load_target
from perfgate.engines.embedded.model import (
    fuse_projections,
    kv_bucket,
    use_attention_backend,
)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One launch: build the target, time its decode step both ways, say where it ran."""
    began = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = load_target(args.model, device, dtype, load_format="dummy")
    model.setup_cache(args.batch)
    fuse_projections(model)
    if device.type == "cuda" and triton_attention.available():
        use_attention_backend(model, "triton")
    compiled_layers = 0 if args.eager else compile_layers(model)
    graphs = GraphRunner("cuda" if device.type == "cuda" else "off")
    ids = torch.randint(0, model.config.vocab_size, (args.batch, 1), device=device)
    positions = torch.full((args.batch, 1), args.position, device=device)
    kv_len = kv_bucket(args.position + 1, model.max_seq_len)

    def forward(ids: Tensor, positions: Tensor) -> tuple[Tensor, ...]:
        logits, _ = model(ids, positions, kv_len)  # causal, as the server's step
        return (model.greedy(logits),)

    def replay() -> object:
        return graphs.run("step", forward, ids, positions)

    def served() -> object:  # the server's step: inputs in, replay, tokens out to the host
        (tokens,) = graphs.run("step", forward, ids, positions)
        return tokens.tolist()

    timer = Timer(device, args.replays, args.blocks)
    with torch.inference_mode():
        replay()
        ready_s = time.perf_counter() - began
        device_blocks = timer.blocks_of(replay)
        served_blocks = Timer(torch.device("cpu"), args.replays, args.blocks).blocks_of(served)
        prefill = prefill_ways(model, args, device)
    report = read_gpus(apps=False) if device.type == "cuda" else None
    at = torch.cuda.current_device() if device.type == "cuda" else 0
    gpu = next((g for g in report.gpus if g.index == at), report.gpus[0]) if report else None
    return {
        "pid": os.getpid(),
        "variant": os.environ.get(VARIANT_VARIABLE, "as-placed"),
        **host_probes(torch, bus_id() if device.type == "cuda" else None),
        "ready_s": round(ready_s, 1),
        "compiled_layers": compiled_layers,
        "device_ms": statistics.median(device_blocks),
        "device_cv": cv(device_blocks),
        "served_ms": statistics.median(served_blocks),
        "served_cv": cv(served_blocks),
        **prefill,
        "sm_clock_mhz": gpu.sm_clock_mhz if gpu else None,
        "temperature_c": gpu.temperature_c if gpu else None,
        "clock_reasons": gpu.reasons() if gpu else [],
    }


# The GPU's sleep queued ahead of a prefill, in its clock's cycles: 0.1 s at 2 GHz, longer than
# any prefill's host side seen on record (13-32 ms on an H200: benchmarks/wall_parts.py).
SLEEP_CYCLES = 200_000_000


def prefill_ways(model: Any, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """A batch's prefill (--batch prompts of --prefill-tokens, each from slot 0, as the
    server's first forward of a batch), --prefills times after a warm-up, timed three ways
    (four on CUDA):
    ``prefill_served`` the clock around the forward and its tokens read back, as a server's
    prefill ends; ``prefill_enqueue`` the clock until the forward returns, the host's own work
    of queueing its kernels; on CUDA ``prefill_gpu``, the GPU's time alone: the forward
    queued behind a sleep on the GPU longer than its host side, so that every kernel is
    waiting when the GPU gets to it, timed by CUDA events. A launch whose served prefill is
    slow with its GPU time unchanged is slow on the host; the enqueue says whether it is in
    the queueing of kernels. On CUDA also ``prefill_graph``: the same forward replayed from a
    CUDA graph (a server's ``--cuda-graph-backend-prefill full``), timed as served, which
    shows what taking the host's queueing out of the prefill leaves."""
    tokens = args.prefill_tokens
    ids = torch.randint(0, model.config.vocab_size, (args.batch, tokens), device=device)
    positions = torch.arange(tokens, device=device).expand(args.batch, -1)  # as pad_prompts
    kv_len = kv_bucket(tokens + 1, model.max_seq_len)

    def forward(tokens: Tensor = ids) -> Tensor:
        logits, _ = model(tokens, positions, kv_len)  # causal
        chosen: Tensor = model.greedy(logits[:, -1:])
        return chosen

    for _ in range(3):  # the first compiles the prefill's shapes, as a server's first batch
        forward().tolist()
    served, enqueue, gpu = [], [], []
    for _ in range(args.prefills):  # each timing starts idle: .tolist() and the event waited
        began = time.perf_counter()
        forward().tolist()
        served.append((time.perf_counter() - began) * 1e3)
        if device.type == "cuda":
            torch.cuda._sleep(SLEEP_CYCLES)  # type: ignore[no-untyped-call]
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
        began = time.perf_counter()
        forward()
        enqueue.append((time.perf_counter() - began) * 1e3)
        if device.type == "cuda":
            end.record()
            end.synchronize()
            gpu.append(start.elapsed_time(end))
    found: dict[str, Any] = {"prefill_tokens": tokens, "prefill_graph_error": None}
    graph: list[float] = []
    if device.type == "cuda":
        try:
            graph = _replayed_prefills(forward, ids, args.prefills, "cuda")
        except RuntimeError as failed:  # a capture refused: said in the record, the rest kept
            found["prefill_graph_error"] = str(failed).strip().splitlines()[0][:200]
    ways = (("served", served), ("enqueue", enqueue), ("gpu", gpu), ("graph", graph))
    for way, values in ways:
        found[f"prefill_{way}_ms"] = statistics.median(values) if values else None
        found[f"prefill_{way}_cv"] = cv(values) if len(values) > 1 else None
    return found


def _replayed_prefills(
    forward: Callable[[Tensor], Tensor], ids: Tensor, count: int, mode: str
) -> list[float]:
    """ms of `count` prefills of ids replayed from one graph of forward (GraphRunner's `mode`:
    cuda, or emulate to test this on a CPU), each as served."""
    runner = GraphRunner(mode, prefill=True)

    def replayed() -> Tensor:
        (chosen,) = runner.run_prefill("prefill", lambda tokens: (forward(tokens),), ids)
        return chosen

    replayed().tolist()  # captures
    times = []
    for _ in range(count):
        began = time.perf_counter()
        replayed().tolist()
        times.append((time.perf_counter() - began) * 1e3)
    return times


VARIANTS = ("as-placed", "gpu-local", "one-cpu", "hash-seed", "fastest-cpus", "no-aslr")
VARIANT_VARIABLE = "PERFGATE_LAUNCH_VARIANT"
NO_ASLR = 0x0040000  # personality(2)'s ADDR_NO_RANDOMIZE, as `setarch -R` sets it


def bus_id() -> str | None:
    """The current GPU's PCI address as sysfs names it (0000:19:00.0), where torch says."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    parts = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    if any(p is None for p in parts):
        return None
    domain, bus, dev = parts
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def fastest_cpus(allowed: list[int], rounds: int = 3) -> list[int]:
    """The quarter of ``allowed`` (two at least) where a fixed piece of Python ran fastest
    just now: each CPU timed ``rounds`` times (about 1.5 ms each), the order reversed every
    other round, the median kept. This process keeps its own CPUs after."""
    home = os.sched_getaffinity(0)
    times: dict[int, list[float]] = {cpu: [] for cpu in allowed}
    try:
        for r in range(rounds):
            for cpu in allowed if r % 2 == 0 else reversed(allowed):
                os.sched_setaffinity(0, {cpu})
                times[cpu].append(python_loop_us(rounds=1))
    finally:
        os.sched_setaffinity(0, home)
    ranked = sorted(allowed, key=lambda cpu: statistics.median(times[cpu]))
    return sorted(ranked[: max(2, len(allowed) // 4)])


def variant_setup(variant: str, device: str) -> tuple[dict[str, str], set[int] | None]:
    """The environment and the CPUs a launch of ``variant`` gets (None: as the OS places it);
    ``no-aslr`` also needs ``without_aslr`` in the process before it starts the launch."""
    env = {**os.environ, VARIANT_VARIABLE: variant}
    allowed = sorted(os.sched_getaffinity(0))
    if variant == "fastest-cpus":  # the CPUs fastest now, wherever the GPU is
        return env, set(fastest_cpus(allowed))
    local = None
    if device == "cuda" and torch.cuda.is_available():
        local = gpu_placement(bus_id())["gpu_local_cpus"]
    near = [c for c in (local or allowed) if c in allowed] or allowed
    if variant == "gpu-local":
        return env, set(near)
    if variant == "one-cpu":
        return env, {near[-1]}
    if variant == "hash-seed":
        env["PYTHONHASHSEED"] = "0"
    return env, None


def measure(args: argparse.Namespace) -> dict[str, Any]:
    launches = []
    for n in range(args.launches):
        variant = args.variants[n % len(args.variants)]
        env, cpus = variant_setup(variant, args.device)
        command = [sys.executable, __file__, "--child", *args.passed]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=args.timeout_s,
                env=env,
                preexec_fn=_placed(variant, cpus),
            )
        except subprocess.TimeoutExpired:
            raise
        except subprocess.SubprocessError as refused:  # the placement, refused in the child
            raise SystemExit(
                f"launch {n + 1} ({variant}): this machine refuses it: {refused}"
            ) from refused
        if done.returncode != 0:
            raise SystemExit(f"launch {n + 1} failed (exit {done.returncode}):\n{done.stderr}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        launches.append(row)
        print(f"launch {n + 1} ({variant}): device {row['device_ms']:.3f} ms, served "
              f"{row['served_ms']:.3f} ms, cpu {row['cpu']}, sm clock {row['sm_clock_mhz']}",
              file=sys.stderr)  # fmt: skip
    return {
        "model": args.model,
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "batch": args.batch,
        "position": args.position,
        "replays": args.replays,
        "blocks": args.blocks,
        "launches": launches,
    }


def _built(launches: list[dict[str, Any]]) -> str:
    """How the launches built the target, as each child says: its layers compiled, or eager."""
    counts = sorted({row["compiled_layers"] for row in launches})
    if counts == [0]:
        return "eager (--eager)"
    return f"{', '.join(map(str, counts))} layers compiled"


def render(results: dict[str, Any]) -> str:
    launches = results["launches"]
    lines = [
        f"# Decode step and prefill over fresh launches: {results['model']} on "
        f"{results['device_name']}",
        "",
        f"torch {results['torch_version']}; batch {results['batch']} at position "
        f"{results['position']}; per launch the median of {results['blocks']} blocks of "
        f"{results['replays']} steps; {_built(launches)}.",
        "",
        "| launch | variant | device ms | served ms | served - device | CPU (of allowed) | "
        "CPU / GPU node | CPU MHz | Python loop us | launch + sync us | alloc offset | SM MHz | "
        "temperature | clock reasons | ready s |",
        "| ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | ---: |",
    ]
    for n, row in enumerate(launches, 1):
        lines.append(
            f"| {n} | {row['variant']} | {row['device_ms']:.3f} | {row['served_ms']:.3f} | "
            f"{row['served_ms'] - row['device_ms']:.3f} | {row['cpu']} ({row['allowed_cpus']}) | "
            f"{_or_dash(row['cpu_node'])} / {_or_dash(row['gpu_node'])} | "
            f"{_or_dash(row['cpu_mhz'])} | {row['python_loop_us']:.0f} | "
            f"{_or_dash(row['launch_sync_us'])} | {_or_dash(row['allocator_offset'])} | "
            f"{_or_dash(row['sm_clock_mhz'])} | {_or_dash(row['temperature_c'])} | "
            f"{', '.join(row['clock_reasons']) or '-'} | {row['ready_s']} |"
        )
    lines += ["", "| way | mean ms | across launches (CV) | within a launch (median CV) |"]
    lines.append("| --- | ---: | ---: | ---: |")
    ways = ["device", "served"] + [
        f"prefill_{way}"
        for way in ("gpu", "enqueue", "served", "graph")
        if _measured(launches, way)
    ]
    for way in ways:
        values = [row[f"{way}_ms"] for row in launches]
        within = statistics.median(row[f"{way}_cv"] or 0.0 for row in launches)
        lines.append(
            f"| {way} | {statistics.fmean(values):.3f} | {cv(values):.2%} | {within:.2%} |"
        )
    if _measured(launches, "served"):
        lines += ["", f"Prefill: {launches[0]['prefill_tokens']} tokens a prompt; per launch, ms:"]
        lines += [
            "",
            "| launch | GPU alone | host's enqueue | served | served from a graph |",
            "| ---: | ---: | ---: | ---: | ---: |",
        ]
        for n, row in enumerate(launches, 1):
            lines.append(
                f"| {n} | {_or_dash(row['prefill_gpu_ms'])} | {row['prefill_enqueue_ms']:.3f} "
                f"| {row['prefill_served_ms']:.3f} | {_or_dash(row.get('prefill_graph_ms'))} |"
            )
    refused = sorted(
        {row["prefill_graph_error"] for row in launches if row.get("prefill_graph_error")}
    )
    lines += [f"\nThe prefill from a graph was not timed: {error}" for error in refused]
    return "\n".join(lines + _by_variant(launches) + _probes_against_host(launches)) + "\n"


def _measured(launches: list[dict[str, Any]], way: str) -> bool:
    return all(row.get(f"prefill_{way}_ms") is not None for row in launches)


def _by_variant(launches: list[dict[str, Any]]) -> list[str]:
    """Per variant: the launches, and how far their served steps scatter."""
    lines = [
        "",
        "| variant | launches | served ms, mean | across launches (CV) | served - device ms "
        "| Python loop us |",
    ]
    lines.append("| --- | ---: | ---: | ---: | --- | --- |")
    for variant in dict.fromkeys(row["variant"] for row in launches):
        rows = [r for r in launches if r["variant"] == variant]
        served = [r["served_ms"] for r in rows]
        host = ", ".join(f"{r['served_ms'] - r['device_ms']:.3f}" for r in rows)
        loops = ", ".join(f"{r['python_loop_us']:.0f}" for r in rows)
        lines.append(
            f"| {variant} | {len(rows)} | {statistics.fmean(served):.3f} | {cv(served):.2%} "
            f"| {host} | {loops} |"
        )
    return lines


PROBES = ("cpu", "cpu_node", "cpu_mhz", "python_loop_us", "launch_us", "launch_sync_us",
          "allocator_offset", "anon_huge_pages_kb", "aslr_off", "threads",
          "sm_clock_mhz")  # fmt: skip


def _probes_against_host(launches: list[dict[str, Any]]) -> list[str]:
    """How each probe moves across launches with the host's share of a step and, where it was
    timed, with the host's enqueue of a prefill (Pearson's r)."""
    targets = {"served - device": [r["served_ms"] - r["device_ms"] for r in launches]}
    if _measured(launches, "enqueue"):
        targets["the prefill's enqueue"] = [r["prefill_enqueue_ms"] for r in launches]
    heads = "".join(f" r with {name} |" for name in targets)
    lines = ["", f"| probe |{heads} values |", "| --- |" + " ---: |" * len(targets) + " --- |"]
    for probe in PROBES:
        values = [r.get(probe) for r in launches]
        shown = ", ".join(_or_dash(v) for v in values)
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        rs = "".join(f" {_r(numbers, target)} |" for target in targets.values())
        lines.append(f"| {probe} |{rs} {shown} |")
    return lines


def _r(numbers: list[float], target: list[float]) -> str:
    """Pearson's r of two series, or a dash where a series is short, incomplete or flat."""
    if len(numbers) == len(target) >= 3 and len(set(numbers)) > 1 and len(set(target)) > 1:
        return f"{statistics.correlation(numbers, target):+.2f}"
    return "-"


def _or_dash(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def without_aslr() -> None:
    """Start every program this process runs from now on at the same addresses (personality
    ADDR_NO_RANDOMIZE, inherited through fork and exec): the layout the same in every launch."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current == -1 or libc.personality(current | NO_ASLR) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) refused")


def _placed(variant: str, cpus: set[int] | None) -> Callable[[], None] | None:
    """What a child runs before it starts: keep to ``cpus``, with every thread it makes, and
    for ``no-aslr`` without address randomisation."""
    if cpus is None and variant != "no-aslr":
        return None

    def place() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if variant == "no-aslr":
            without_aslr()

    return place


def _without_variants(argv: list[str]) -> list[str]:
    """The arguments a child gets: the parent's, less --variants (the parent places it)."""
    return without_flag(argv, "--variants")


# The placements a whole `perfgate run` can be given (--run-as): one CPU for its client and
# both servers would measure their contention, not a placement.
RUN_AS = ("as-placed", "gpu-local", "hash-seed", "fastest-cpus", "no-aslr")


def run_as(argv: list[str]) -> int:
    """``--run-as VARIANT [--device D] -- COMMAND...``: run the command placed as a launch of
    that variant is (its CPUs, its environment); every process it starts inherits both, so
    the servers of a `perfgate run` run as the diagnosis measured. Exits 64 on bad usage, 69
    where the machine refuses the placement (a container's seccomp profile may refuse
    ``no-aslr``'s personality)."""
    variant, rest = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    device = "cuda"
    if rest[:1] == ["--device"] and len(rest) > 1:
        device, rest = rest[1], rest[2:]
    if variant not in RUN_AS or rest[:1] != ["--"] or len(rest) < 2:
        print(
            f"--run-as: {variant!r}: usage: --run-as VARIANT [--device D] -- COMMAND..., "
            f"VARIANT one of {', '.join(RUN_AS)}",
            file=sys.stderr,
        )
        return 64
    env, cpus = variant_setup(variant, device)
    place = _placed(variant, cpus)
    try:
        if place is not None:
            place()
    except OSError as refused:
        print(f"--run-as {variant}: this machine refuses it: {refused}", file=sys.stderr)
        return 69
    command = rest[1:]
    os.execvpe(command[0], command, env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--run-as"]:
        return run_as(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model", default="perfgate/llama-large")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--position", type=int, default=200)
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--replays", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument(
        "--prefill-tokens",
        type=int,
        default=48,
        help="a prompt's, padded: the default prompts' longest is 47 bytes, a token each",
    )
    parser.add_argument("--prefills", type=int, default=20, help="timed prefills a launch")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="build the target without torch.compile, as a server without "
        "--enable-torch-compile: the script's path on a CPU, where compiling costs tens of "
        "seconds a launch and times nothing the GPU record needs",
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="for each launch")
    parser.add_argument(
        "--variants",
        type=lambda text: text.split(","),
        default=["as-placed"],
        help=f"placements to take in turn, comma-separated: {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="measure nothing: print the tables of an earlier run's results.json",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render is not None:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: no variant {unknown[0]!r}; variants are {', '.join(VARIANTS)}")
    args.passed = _without_variants([a for a in argv if a != "--child"])
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out, measure(args), render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
