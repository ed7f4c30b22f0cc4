"""`perfgate profile`: a torch.profiler trace of a few decode cycles, split by phase and kind."""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate import metrics
from perfgate.commands import add_command
from perfgate.config import Scenario
from perfgate.engines.server_commands import MODES
from perfgate.errors import ConfigError
from perfgate.files import check_output_folder
from perfgate.folders import new_folder, process_folder, stamp
from perfgate.preflight import check_scenario, preflight
from perfgate.profile.trace import GPU_KERNELS
from perfgate.progress import stderr_reporter
from perfgate.selection import selection_from
from perfgate.settings import Settings, add_options

ACTIVITIES = ("CPU", "GPU")
LOW_COVERAGE = 0.5  # of the cycle time, below which a GPU trace surely misses kernels
TRACE_NAME = "trace.json.gz"
MAX_CYCLES = 1000  # a trace of more is too large to read, and takes as long to write


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "profile",
        description="Launch a scenario's server with the probe, time its repeats, then profile "
        "the next --cycles decode cycles through the server's /start_profile (SGLang's API; "
        "the embedded engine serves it too). Writes the trace (Chrome format, gzipped: "
        "Perfetto and chrome://tracing open it), profile.md and profile.json to --out, and "
        "prints the table: device time (GPU kernels; CPU operators on a CPU) per phase and "
        "category (matmul, attention, communication, other), and the profiler's own cost.",
    )
    add_options(parser.add_argument, ("config",))
    parser.add_argument("--scenario", metavar="NAME", help="default: the first default scenario")
    add_options(parser.add_argument, ("engine",))
    parser.add_argument("--mode", choices=MODES, default="spec", help="server to profile")
    parser.add_argument(
        "--cycles", type=int, default=5, help="decode cycles to profile (default 5; keep it small)"
    )
    parser.add_argument(
        "--activities",
        default="CPU,GPU",
        help="what to record: CPU or CPU,GPU (default; GPU alone is refused: the phase marks "
        "are CPU events; on a CPU server GPU adds nothing)",
    )
    parser.add_argument("--phase", default=metrics.VERIFY, help="phase to sum up (default verify)")
    parser.add_argument("--repeats", type=int, help="unprofiled repeats (default: the scenario's)")
    parser.add_argument(
        "--disable-cuda-graph",
        action="store_true",
        help="run the server's forwards eagerly (both engines' flag): every kernel then has "
        "its own launch in the trace",
    )
    parser.add_argument("--out", metavar="DIR", help="default: .perfgate/profiles/<time>")


def run(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.profile.capture import capture_profile
    from perfgate.profile.render import profile_json, render_markdown

    out = None if args.out is None else check_output_folder(args.out, "--out")
    chosen = selection_from(settings, writes=False)  # a profile records nothing
    config, scenario = chosen.config, _scenario(args, chosen.scenario)
    activities = _activities(args.activities)
    if not 1 <= args.cycles <= MAX_CYCLES:
        raise ConfigError(
            f"must be from 1 to {MAX_CYCLES}", field="--cycles", fix="profile a few cycles, e.g. 5"
        )
    if args.phase not in metrics.NAMED_PHASES:
        raise ConfigError(
            f"unknown phase {args.phase!r}",
            field="--phase",
            fix=f"use one of {', '.join(metrics.NAMED_PHASES)}",
        )
    check_scenario(scenario, config.path)
    root = config.path.parent
    workdir = process_folder(root) / f"profile-{scenario.name}"
    print(f"profiling {args.cycles} {args.mode} cycles of {scenario.name}...", file=sys.stderr)
    result = capture_profile(
        scenario,
        workdir,
        cycles=args.cycles,
        mode=args.mode,
        activities=activities,
        checked=preflight(scenario, config.path),
        progress=stderr_reporter(),  # stdout carries the breakdown
    )
    report = profile_json(result, TRACE_NAME)
    out = out or new_folder(root / ".perfgate" / "profiles", stamp())
    markdown = render_markdown(report, args.phase)
    write_outputs(out, result.trace_path, report, markdown)
    print(markdown)
    if report["source"] == GPU_KERNELS and (report["coverage"] or 0.0) < LOW_COVERAGE:
        print(
            "perfgate: warning: the trace's kernels cover little of the cycle time: the "
            "profiler may not see kernels replayed from CUDA graphs; try --disable-cuda-graph",
            file=sys.stderr,
        )
    print(f"wrote {out / TRACE_NAME}, {out / 'profile.md'}, {out / 'profile.json'}")
    return 0


def _scenario(args: argparse.Namespace, scenario: Scenario) -> Scenario:
    if args.repeats is not None:
        if args.repeats < 1:
            raise ConfigError("must be >= 1", field="--repeats", fix="time at least one repeat")
        scenario = replace(scenario, repeats=args.repeats)
    if args.disable_cuda_graph:
        scenario = replace(scenario, extra_args=(*scenario.extra_args, "--disable-cuda-graph"))
    return scenario


def _activities(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in ACTIVITIES]
    if not names or unknown:
        raise ConfigError(
            f"{text!r} names no activity or an unknown one",
            field="--activities",
            fix="use CPU, GPU or CPU,GPU",
        )
    if "CPU" not in names:
        # torch.profiler records the probe's phase marks (record_function) as CPU events.
        raise ConfigError(
            "GPU alone records kernels but not the phase marks that say which phase ran them",
            field="--activities",
            fix="use CPU,GPU (the default) to split the GPU's kernels by phase",
        )
    return names


def write_outputs(out: Path, trace: Path, report: dict[str, Any], markdown: str) -> None:
    """Write the gzipped trace, profile.md and profile.json into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    if trace.name.endswith(".gz"):
        shutil.copyfile(trace, out / TRACE_NAME)
    else:
        with trace.open("rb") as source, gzip.open(out / TRACE_NAME, "wb") as target:
            shutil.copyfileobj(source, target)
    (out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "profile.md").write_text(markdown)
