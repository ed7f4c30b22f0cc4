"""The self-hosted runner's job hooks: a clean, idle, healthy machine before every job.

``ACTIONS_RUNNER_HOOK_JOB_STARTED`` runs `job_started` (through runner/hooks/job-started.sh):
end the servers earlier jobs left, wait for the GPUs to be idle, refuse unhealthy ones, and
save the GPUs' settings where the run's fingerprint finds them (``PERFGATE_MACHINE_STATE``,
exported through ``GITHUB_ENV``). Any problem fails the job before it starts (exit 69), with
one line per GPU that says what is wrong. ``ACTIONS_RUNNER_HOOK_JOB_COMPLETED`` runs
`job_completed`: it ends leftovers and only warns, since a failing post-job hook would mark a
green job red.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from perfgate.ci.workflow_commands import Annotation
from perfgate.devices import GpuReport, listed_devices, read_gpus, visible_gpus
from perfgate.engines.processes import end_processes, read_process
from perfgate.errors import ExitCode
from perfgate.files import write_text_atomically
from perfgate.machine_state import STATE_VARIABLE
from perfgate.runner.gpu_health import Limits, find_problems, fingerprint_fields
from perfgate.runner.leftovers import (
    OWNER_VARIABLE,
    Leftover,
    find_leftovers,
    runner_temp,
    work_folder,
)

STATE_NAME = "perfgate-machine-state.json"
POLL_S = 2.0


@dataclass(frozen=True)
class HookOptions:
    limits: Limits = field(default_factory=Limits)
    wait_s: float = 60.0  # for GPU memory to be released after leftovers end
    grace_s: float = 10.0  # between SIGTERM and SIGKILL
    expect_gpus: int | None = None  # fewer visible GPUs: one fell off the bus
    state_file: Path | None = None


@dataclass
class HookResult:
    ended: list[Leftover] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report: GpuReport | None = None
    state_file: Path | None = None

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.INFRASTRUCTURE if self.problems else ExitCode.PASS


def clean_up(result: HookResult, environ: Mapping[str, str], grace_s: float) -> None:
    """End this runner's leftover servers (and anything of it holding a GPU).

    Outside a runner's job (no RUNNER_NAME) nothing is ended: on a shared workstation the
    servers of the same user may be someone's work in progress.
    """
    owner = environ.get(OWNER_VARIABLE)
    if not owner:
        result.notes.append(f"{OWNER_VARIABLE} is unset (not a runner's job): no process ended")
        return
    report = read_gpus()
    gpu_pids = {app.pid for app in report.apps} if report else set()
    leftovers = find_leftovers(owner, gpu_pids, work=work_folder(environ))
    survivors = end_processes([left.process for left in leftovers], grace_s)
    result.ended += leftovers
    for survivor in survivors:
        result.problems.append(
            f"pid {survivor.pid} survived SIGKILL (stuck in the driver?): the GPU it holds needs a "
            "reboot of the runner host"
        )


def wait_idle(options: HookOptions, environ: Mapping[str, str]) -> GpuReport | None:
    """Read the GPUs until every visible one is idle, or `wait_s` passed (an unhealthy GPU
    does not get better by waiting)."""
    deadline = time.monotonic() + options.wait_s
    while True:
        report = _visible_report(environ)
        problems = find_problems(report, options.limits) if report else []
        if not any(problem.kind == "busy" for problem in problems):
            return report
        if time.monotonic() >= deadline:
            return report
        time.sleep(POLL_S)


def _visible_report(environ: Mapping[str, str]) -> GpuReport | None:
    report = read_gpus()
    if report is None:
        return None
    gpus = tuple(visible_gpus(report.gpus, listed_devices(environ), strict=False))
    return GpuReport(gpus, report.apps, report.not_queried)


def _holders(report: GpuReport) -> list[str]:
    lines = []
    for app in report.apps:
        found = read_process(app.pid)
        command = found.cmdline if found else "(not visible to this user)"
        lines.append(f"  pid {app.pid} on {app.gpu_uuid}: {command}")
    return lines


def judge_gpus(result: HookResult, report: GpuReport | None, options: HookOptions) -> None:
    """Add a problem for each busy or unhealthy GPU, and for missing ones."""
    if report is None:
        if options.expect_gpus:
            result.problems.append(
                f"no GPU is visible (nvidia-smi is not on PATH) but {options.expect_gpus} are "
                "expected: check the driver and the runner's PATH"
            )
        else:
            result.notes.append("no nvidia-smi on PATH: no GPU to check")
        return
    if options.expect_gpus and len(report.gpus) < options.expect_gpus:
        result.problems.append(
            f"{len(report.gpus)} GPU(s) visible, {options.expect_gpus} expected: one fell off "
            "the bus or CUDA_VISIBLE_DEVICES hides it; `nvidia-smi -L` lists them"
        )
    problems = find_problems(report, options.limits)
    result.problems += [problem.describe() for problem in problems]
    if any(problem.kind == "busy" for problem in problems):
        result.problems.append(
            "processes that hold a GPU and are not this runner's leftovers (stop them, or "
            "restart the host):\n" + "\n".join(_holders(report) or ["  (none listed)"])
        )
    if any(problem.kind == "unhealthy" for problem in problems):
        result.problems.append(
            "an unhealthy GPU gives timings that cannot be compared: drain this runner, then "
            "reset the GPU (`nvidia-smi -r -i INDEX`) or have it replaced"
        )


def job_started(options: HookOptions, environ: Mapping[str, str] | None = None) -> HookResult:
    """Clean up, check the GPUs and save their settings; `exit_code` says whether to go on."""
    env = os.environ if environ is None else environ
    result = HookResult()
    clean_up(result, env, options.grace_s)
    report = wait_idle(options, env)
    result.report = report
    judge_gpus(result, report, options)
    result.state_file = save_state(result, options.state_file or default_state_file(env), env)
    export_variable(env, STATE_VARIABLE, str(result.state_file))
    return result


def job_completed(options: HookOptions, environ: Mapping[str, str] | None = None) -> HookResult:
    """End what the job left behind; problems become notes (never fail a finished job)."""
    env = os.environ if environ is None else environ
    result = HookResult()
    clean_up(result, env, options.grace_s)
    result.notes += result.problems
    result.problems = []
    return result


def default_state_file(environ: Mapping[str, str]) -> Path:
    """Where job-started saves the machine's state: the job's temp folder when there is one."""
    return (runner_temp(environ) or Path(tempfile.gettempdir())) / STATE_NAME


def save_state(result: HookResult, path: Path, environ: Mapping[str, str]) -> Path:
    """Write the GPUs' state and fingerprint fields as JSON (whole, or not at all)."""
    gpus = result.report.gpus if result.report else ()
    document = {
        "schema": 1,
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runner": environ.get(OWNER_VARIABLE),
        "fingerprint": fingerprint_fields(gpus),
        "report": result.report.to_dict() if result.report else None,
        "ended": [leftover.describe() for leftover in result.ended],
        "problems": result.problems,
    }
    return write_text_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def export_variable(environ: Mapping[str, str], name: str, value: str) -> None:
    """Set `name` for the job's later steps through the runner's GITHUB_ENV file, if any."""
    target = environ.get("GITHUB_ENV")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(f"{name}={value}\n")


def render_result(result: HookResult, hook: str) -> list[str]:
    """What the hook prints: what it ended, its notes, then each problem as an annotation."""
    lines = [f"perfgate {hook}: ended {left.describe()}" for left in result.ended]
    if result.report is not None:
        for gpu in result.report.gpus:
            lines.append(
                f"perfgate {hook}: GPU {gpu.index} {gpu.name}: {gpu.memory_used_mib:.0f} MiB used, "
                f"driver {gpu.driver}, SM clock {gpu.sm_clock_mhz or '-'}/"
                f"{gpu.sm_clock_max_mhz or '-'} MHz, reasons {','.join(gpu.reasons()) or 'none'}"
            )
        if result.report.not_queried:
            lines.append(
                f"perfgate {hook}: not known to this driver: {', '.join(result.report.not_queried)}"
            )
    lines += [f"perfgate {hook}: {note}" for note in result.notes]
    if result.state_file is not None:
        lines.append(f"perfgate {hook}: machine state saved to {result.state_file}")
    for problem in result.problems:
        head, _, rest = problem.partition("\n")
        lines.append(Annotation("error", head, f"perfgate {hook}").render())
        lines += rest.splitlines()
    if result.problems:
        lines.append(f"perfgate {hook}: the job cannot run on this machine (exit 69)")
    return lines
