"""`perfgate doctor`: can this machine run the gate? Each check says ok, warn or fail, and why.

A failed check carries perfgate's exit code for it: 64 for what the user must fix (config,
baseline files, an unsupported engine), 69 for the machine (no or busy or unhealthy GPUs, no
free port, an unreachable history). Nothing is launched and nothing is written.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from perfgate.baselines import baseline_path, load_baseline
from perfgate.config import Config, Scenario, load_config, resolve_sqlite_url
from perfgate.engines import sglang as sglang_facts
from perfgate.engines.launch import free_port
from perfgate.errors import ExitCode, PerfgateError
from perfgate.fingerprint import GpuInfo, default_profile, detect_gpus, perfgate_version
from perfgate.runner.gpus import Limits, find_problems, read_gpus
from perfgate.runner.state import STATE_VARIABLE
from perfgate.store import check_history
from perfgate.store.database import parse_history_url, sqlite_path

SGLANG_DEFAULT_PORT = 30000  # where a hand-started SGLang server listens
COMPARED = ("gpu", "gpu_count", "driver", "cuda", "torch", "engine_version")  # baseline vs here


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return vars(self).copy()


@dataclass(frozen=True)
class DoctorOptions:
    config: str | None = None
    scenarios: tuple[str, ...] = ()
    engine: str | None = None
    db: str | None = None
    baselines: str | None = None
    profile: str | None = None
    gate: bool = True  # False: baselines are not needed (a first run)


@dataclass
class Machine:
    """What the checks share: the config, the scenarios and what nvidia-smi shows."""

    options: DoctorOptions
    environ: Mapping[str, str]
    config: Config | None = None
    scenarios: list[Scenario] = field(default_factory=list)
    gpus: GpuInfo | None = None


def _fail(name: str, error: PerfgateError) -> Check:
    return Check(name, "fail", str(error), int(error.exit_code))


def check_config(machine: Machine) -> list[Check]:
    options = machine.options
    machine.config = load_config(options.config)
    chosen = machine.config.select(options.scenarios)
    machine.scenarios = [s.with_engine(options.engine) if options.engine else s for s in chosen]
    names = ", ".join(s.name for s in machine.scenarios)
    return [Check("config", "ok", f"{machine.config.path}: checking {names}")]


def check_python(machine: Machine) -> list[Check]:
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return [
            Check("torch", "fail", "torch is not installed for perfgate", int(ExitCode.BAD_INPUT))
        ]
    return [
        Check(
            "perfgate", "ok", f"perfgate {perfgate_version()} on Python {platform.python_version()}"
        ),
        Check("torch", "ok", f"torch {torch}"),
    ]


def _needs_gpu(scenario: Scenario) -> bool:
    return scenario.device != "cpu" and (scenario.engine == "sglang" or scenario.device == "cuda")


def check_engines(machine: Machine) -> list[Check]:
    checks = []
    for scenario in machine.scenarios:
        name = f"engine {scenario.name}"
        if scenario.engine != "sglang":
            checks.append(Check(name, "ok", f"{scenario.engine} (perfgate {perfgate_version()})"))
            continue
        where = f"scenarios.{scenario.name}.python"
        try:
            python = scenario.python or sys.executable
            installed = sglang_facts.installed_versions(python, {**machine.environ, **scenario.env})
            release = sglang_facts.require_sglang(installed, where)
        except PerfgateError as error:
            checks.append(_fail(name, error))
            continue
        checks.append(
            Check(name, "ok", f"sglang {release.version} (torch {installed.torch}) in {python}")
        )
    return checks


def check_gpus(machine: Machine) -> list[Check]:
    report = read_gpus()
    needing = [s for s in machine.scenarios if _needs_gpu(s)]
    if report is None:
        if needing:
            detail = f"no nvidia-smi on PATH, but {needing[0].name} needs GPUs"
            return [Check("gpus", "fail", detail, int(ExitCode.INFRASTRUCTURE))]
        return [Check("gpus", "ok", "none (the selected scenarios run on the CPU)")]
    machine.gpus = detect_gpus()
    cuda = machine.gpus.cuda if machine.gpus else "unknown"
    first = report.gpus[0] if report.gpus else None
    shown = (
        f"{len(report.gpus)} x {first.name}, driver {first.driver}, CUDA {cuda}"
        if first
        else "none"
    )
    checks = [Check("gpus", "ok", shown)]
    # A busy or unhealthy GPU fails only scenarios that use one; CPU scenarios get a warning.
    status, code = ("fail", int(ExitCode.INFRASTRUCTURE)) if needing else ("warn", 0)
    for problem in find_problems(report, Limits()):
        checks.append(Check("gpus", status, problem.describe(), code))
    for scenario in needing:
        if scenario.tp > len(report.gpus):
            detail = f"{scenario.name} needs tp = {scenario.tp} GPUs; {len(report.gpus)} visible"
            checks.append(Check("gpus", "fail", detail, int(ExitCode.INFRASTRUCTURE)))
    return checks


def check_ports(machine: Machine) -> list[Check]:
    try:
        port = free_port()
    except OSError as error:
        detail = f"no free TCP port on 127.0.0.1 ({error.strerror}); the servers need one each"
        return [Check("ports", "fail", detail, int(ExitCode.INFRASTRUCTURE))]
    checks = [Check("ports", "ok", f"free ports on 127.0.0.1 (e.g. {port})")]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if sock.connect_ex(("127.0.0.1", SGLANG_DEFAULT_PORT)) == 0:
            checks.append(
                Check(
                    "ports",
                    "warn",
                    f"something listens on {SGLANG_DEFAULT_PORT}, SGLang's default port: a server "
                    "left behind? (`perfgate runner job-completed` ends this runner's)",
                )
            )
    return checks


def _history_url(machine: Machine) -> str:
    if machine.options.db:
        return resolve_sqlite_url(machine.options.db, Path.cwd())
    assert machine.config is not None
    return machine.config.history_url


def check_history_db(machine: Machine) -> list[Check]:
    url = _history_url(machine)
    check_history(url)
    checks = [Check("history", "ok", f"{url}: reachable, perfgate's schema or new")]
    path = sqlite_path(parse_history_url(url))
    workspace = machine.environ.get("GITHUB_WORKSPACE")
    if path is not None and workspace and path.resolve().is_relative_to(Path(workspace).resolve()):
        detail = (
            f"{path} is inside the job's checkout, which the next checkout cleans: set "
            "PERFGATE_DB_URL in the runner's environment (docs/runner-setup.md, History)"
        )
        checks.append(Check("history", "warn", detail))
    return checks


def _profile(machine: Machine) -> str:
    return machine.options.profile or default_profile(machine.gpus or detect_gpus())


def check_baselines(machine: Machine) -> list[Check]:
    if not machine.options.gate:
        return [Check("baselines", "ok", "not needed (--no-gate)")]
    assert machine.config is not None
    folder = machine.config.baselines_dir
    if machine.options.baselines:
        folder = Path(machine.options.baselines).resolve()
    checks = []
    for scenario in machine.scenarios:
        try:
            baseline = load_baseline(baseline_path(folder, _profile(machine), scenario.name))
        except PerfgateError as error:
            checks.append(_fail("baselines", error))
            continue
        checks.append(
            Check("baselines", "ok", f"{baseline.path}: {len(baseline.runs)} approved run(s)")
        )
        checks += _fingerprint_hints(machine, baseline.path, baseline.fingerprint)
    return checks


def _fingerprint_hints(
    machine: Machine, path: object, fingerprint: Mapping[str, str]
) -> list[Check]:
    here = {"gpu": machine.gpus.name if machine.gpus else "none"}
    if machine.gpus:
        here |= {
            "gpu_count": str(machine.gpus.count),
            "driver": machine.gpus.driver,
            "cuda": machine.gpus.cuda,
        }
    differing = [
        f"{k} {fingerprint[k]} -> {here[k]}"
        for k in COMPARED
        if k in here and k in fingerprint and fingerprint[k] != here[k]
    ]
    if not differing:
        return []
    detail = f"{path}: this machine differs ({'; '.join(differing)}): its runs will be incomparable"
    return [Check("baselines", "warn", detail)]


def check_machine_state(machine: Machine) -> list[Check]:
    path = machine.environ.get(STATE_VARIABLE)
    if not path:
        return [
            Check("machine state", "ok", f"{STATE_VARIABLE} unset (the job-started hook sets it)")
        ]
    if not os.path.isfile(path):
        return [Check("machine state", "warn", f"{STATE_VARIABLE}={path}: no such file")]
    return [Check("machine state", "ok", f"{path}: GPU settings go into the fingerprint")]


CHECKS: Sequence[tuple[str, Callable[[Machine], list[Check]]]] = (
    ("config", check_config),
    ("perfgate", check_python),
    ("engines", check_engines),
    ("gpus", check_gpus),
    ("ports", check_ports),
    ("history", check_history_db),
    ("baselines", check_baselines),
    ("machine state", check_machine_state),
)


def run_checks(options: DoctorOptions, environ: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in order; a config that cannot be read stops those that need it."""
    machine = Machine(options, os.environ if environ is None else environ)
    checks: list[Check] = []
    for name, check in CHECKS:
        if machine.config is None and name not in ("config", "perfgate", "ports", "machine state"):
            continue
        try:
            checks += check(machine)
        except PerfgateError as error:
            checks.append(_fail(name, error))
    return checks


def doctor_exit_code(checks: Sequence[Check]) -> ExitCode:
    """64 if any check needs the user to fix something, else 69 for the machine, else 0."""
    codes = {check.exit_code for check in checks if check.status == "fail"}
    for code in (ExitCode.BAD_INPUT, ExitCode.INFRASTRUCTURE):
        if code in codes:
            return code
    return ExitCode.INFRASTRUCTURE if codes else ExitCode.PASS
