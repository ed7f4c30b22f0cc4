"""`perfgate doctor`: can this machine run the gate, and what will a run be judged against?

Each check says ok, warn or fail, and why; a failed check names the fix and carries perfgate's
exit code for it: 64 for what the user must fix (config, baseline files, a history that cannot
be written, an engine's install, CI without a matching reviewed baseline), 69 for the machine
(no, busy or unhealthy GPUs for a GPU scenario, no free port, an unreachable history server).
Nothing is launched and nothing that persists is written.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from perfgate.baselines import Baseline, baseline_path, load_baseline
from perfgate.config import Config, Scenario
from perfgate.devices import (
    GpuReport,
    detect_gpus,
    listed_devices,
    read_gpus,
    visible_gpus,
)
from perfgate.engines.launch import free_port
from perfgate.errors import ConfigError, ExitCode, PerfgateError
from perfgate.hardware import GpuInfo
from perfgate.machine_state import STATE_VARIABLE, load_state_fingerprint
from perfgate.reference import (
    fix_commands,
    machine_note,
    machine_reference,
    missing_baseline,
    requires_baseline,
)
from perfgate.runner.gpu_health import GpuProblem, Limits, find_problems
from perfgate.runner.predict import PredictedServer, predict_fingerprint, predict_server
from perfgate.selection import Selection, selection_from
from perfgate.spec.options import GateOptions
from perfgate.store import probe_write
from perfgate.store.database import describe, parse_history_url, sqlite_path
from perfgate.version import perfgate_version

SGLANG_DEFAULT_PORT = 30000  # where a hand-started SGLang server listens
FAIL, WARN, OK = "fail", "warn", "ok"
ELSEWHERE = "--db or PERFGATE_DB_URL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str
    exit_code: int = 0
    fix: str = ""  # what to do: every fail has one, a warning may

    def to_dict(self) -> dict[str, Any]:
        return vars(self).copy()


@dataclass
class Machine:
    """What the checks share: the config, the scenarios, the GPUs and the servers' facts."""

    options: GateOptions
    environ: Mapping[str, str]
    selection: Selection | None = None  # the config, its scenarios, the profile, the history
    config: Config | None = None
    scenarios: list[Scenario] = field(default_factory=list)
    gpus: GpuInfo | None = None
    servers: dict[str, PredictedServer] = field(default_factory=dict)  # by scenario name


# The fix of each check's failures that carry none of their own.
FIXES = {
    "config": "correct the file or field named (docs/configuration.md), or pass --config PATH",
    "perfgate": "reinstall perfgate with its dependencies (scripts/bootstrap, or pip install .)",
    "engines": "fix the engine's install in the scenario's interpreter (scenarios.NAME.python)",
    "weights": "correct the model named in the scenario (docs/embedded-engine.md)",
    "gpus": "run `nvidia-smi` by hand to see the driver's own error, and repair the driver",
    "ports": "free a port on 127.0.0.1 (the loopback interface must be up)",
    "history": f"point {ELSEWHERE} at a history perfgate can use",
    "baselines": "correct that field, restore the file from git, or write it again with "
    "`perfgate baseline update`",
    "machine state": "run `perfgate runner job-started`, which writes it",
}


def _fail(name: str, error: PerfgateError, fix: str) -> Check:
    """A failed check from an error: its own fix where it names one, else ``fix``."""
    detail, own = str(error), ""
    if isinstance(error, ConfigError) and error.fix:
        detail, own = detail.removesuffix(f"; {error.fix}"), error.fix
    return Check(name, FAIL, detail, int(error.exit_code), own or fix)


def check_config(machine: Machine) -> list[Check]:
    # As a run chooses them; the history's writes are a check of their own (check_history_db).
    machine.selection = selection_from(machine.options, writes=False)
    machine.config = machine.selection.config
    machine.scenarios = list(machine.selection.scenarios)
    names = ", ".join(s.name for s in machine.scenarios)
    return [Check("config", OK, f"{machine.config.path}: checking {names}")]


def check_python(machine: Machine) -> list[Check]:
    from perfgate.preflight import EMBEDDED_INSTALL, EMBEDDED_NEEDS

    missing = [name for name in EMBEDDED_NEEDS if not _installed(name)]
    embedded = [s.name for s in machine.scenarios if s.engine == "embedded"]
    if missing and embedded:
        detail = (
            f"{' and '.join(missing)} not installed for perfgate, and the embedded engine "
            f"needs them ({', '.join(embedded)})"
        )
        return [Check("torch", FAIL, detail, int(ExitCode.BAD_INPUT), EMBEDDED_INSTALL)]
    torch = (
        f"torch {_installed('torch')}"
        if "torch" not in missing
        else f"torch not installed: only the embedded engine needs it ({EMBEDDED_INSTALL})"
    )
    return [
        Check(
            "perfgate", OK, f"perfgate {perfgate_version()} on Python {platform.python_version()}"
        ),
        Check("torch", OK, torch),
    ]


def _installed(package: str) -> str | None:
    """The version of `package` installed for this interpreter, or None."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_engines(machine: Machine) -> list[Check]:
    """Each scenario's engine as its server will report it: release, torch, model identity."""
    checks = []
    for scenario in machine.scenarios:
        name = f"engine {scenario.name}"
        try:
            server = predict_server(scenario, machine.environ)
        except PerfgateError as error:
            checks.append(_fail(name, error, FIXES["engines"]))
            continue
        machine.servers[scenario.name] = server
        checks.append(Check(name, OK, _describe_server(scenario, server)))
    return checks


def _describe_server(scenario: Scenario, server: PredictedServer) -> str:
    if server.installed is not None:
        installed = server.installed
        return f"sglang {installed.sglang} (torch {installed.torch}) in {installed.python}"
    if "version" not in server.info:
        return f"embedded, in {scenario.python} (its own perfgate)"
    models = [
        f"{role} {server.info[key]}"
        for role, key in (("model", "model_identity"), ("draft", "draft_model_identity"))
        if key in server.info
    ]
    shown = f": {', '.join(models)}" if models else ""
    return f"embedded (perfgate {server.info['version']}){shown}"


def check_weights(machine: Machine) -> list[Check]:
    """Each embedded scenario's recipe-trained models: cached here, or the command that makes
    them (a warning: the run itself refuses to start without them)."""
    from perfgate.engines.embedded.model_dirs import load_format_of

    checks = []
    for scenario in machine.scenarios:
        server = machine.servers.get(scenario.name)
        if scenario.engine != "embedded" or server is None or "version" not in server.info:
            continue  # another engine, a model the engine check refused, another interpreter
        spec_flags = (*scenario.extra_args, *scenario.spec_extra_args)
        plain_flags = (*scenario.extra_args, *scenario.plain_extra_args)
        # (model, seeded): the target is loaded by both servers, the draft by the speculative one
        seeded = [
            (scenario.model, load_format_of(spec_flags) == load_format_of(plain_flags) == "dummy"),
            (scenario.draft, load_format_of(spec_flags) == "dummy"),
        ]
        environ = {**machine.environ, **scenario.env}
        checks += _weights_of(scenario, seeded, environ)
    return checks


def _weights_of(
    scenario: Scenario, seeded: Sequence[tuple[str, bool]], environ: Mapping[str, str]
) -> list[Check]:
    from perfgate.engines.embedded.model_dirs import WEIGHTS_FILE, resolve_model
    from perfgate.engines.embedded.recipes import RECIPES, recipe_cache_dir, train_fix

    found = [(name, resolve_model(name), dummy) for name, dummy in seeded]
    trained = [(name, model, dummy) for name, model, dummy in found if model.trained_by]
    if not trained:
        return []
    name = f"weights {scenario.name}"
    if all(dummy for _, _, dummy in trained):
        detail = "seeded (--load-format dummy): the run measures speed only"
        return [Check(name, OK, detail)]
    size = trained[0][1].trained_by
    assert size is not None
    cache = recipe_cache_dir(size, environ=environ)
    missing = [
        n
        for n, model, dummy in trained
        if not dummy and not (cache / model.path.name / WEIGHTS_FILE).is_file()
    ]
    models = ", ".join(dict.fromkeys(n for n, _, _ in trained))
    if not missing:
        return [Check(name, OK, f"{models}: trained weights cached in {cache}")]
    shown = ", ".join(dict.fromkeys(missing))
    detail = f"{shown}: no trained weights on this machine; the run will refuse them"
    return [Check(name, WARN, detail, 0, train_fix(RECIPES[size], cache))]


def _needs_gpu(scenario: Scenario) -> bool:
    if scenario.engine == "sglang":
        return scenario.device != "cpu"
    return (scenario.device or "").startswith("cuda")


def check_gpus(machine: Machine) -> list[Check]:
    needing = [s for s in machine.scenarios if _needs_gpu(s)]
    try:
        report = read_gpus()
    except ConfigError as error:  # PERFGATE_GPU_READER names no way to read them
        return [_fail("gpus", error, FIXES["gpus"])]
    except PerfgateError as error:
        if needing:
            raise
        detail = f"{error}; the selected scenarios run on the CPU"
        return [Check("gpus", WARN, detail, 0, FIXES["gpus"])]
    if report is None or not report.gpus:
        why = "no nvidia-smi on PATH" if report is None else f"{report.source} lists no GPU"
        if needing:
            return [_no_gpu(machine, scenario, why) for scenario in needing]
        return [Check("gpus", OK, f"none ({why}; the selected scenarios run on the CPU)")]
    machine.gpus = detect_gpus()
    cuda = machine.gpus.cuda if machine.gpus else "unknown"
    first = report.gpus[0]
    shown = f"{len(report.gpus)} x {first.name}, driver {first.driver}, CUDA {cuda}"
    checks = [Check("gpus", OK, shown)]
    # A busy or unhealthy GPU fails only scenarios that use one; CPU scenarios get a warning.
    status, code = (FAIL, int(ExitCode.INFRASTRUCTURE)) if needing else (WARN, 0)
    for problem in find_problems(report, Limits()):
        checks.append(Check("gpus", status, problem.describe(), code, _gpu_fix(problem)))
    for scenario in needing:
        checks += _check_gpu_count(machine, scenario, report)
    return checks


def _no_gpu(machine: Machine, scenario: Scenario, why: str) -> Check:
    """A GPU scenario on a machine without GPUs: the scenario, and the CPU ones to pick."""
    needs = 'engine = "sglang"' if scenario.engine == "sglang" else f'device = "{scenario.device}"'
    detail = f"scenario {scenario.name} needs a GPU ({needs}), and this machine has none ({why})"
    assert machine.config is not None
    engine = machine.options.engine
    every = machine.config.select(list(machine.config.scenarios), engine)
    on_cpu = [other.name for other in every if not _needs_gpu(other)]
    if on_cpu:
        fix = "run it on a GPU machine, or select a CPU scenario with `--scenario NAME` "
        fix += f"({', '.join(on_cpu)} in {machine.config.path.name})"
    elif engine:
        fix = f"run it on a GPU machine, or without `--engine {engine}`"
    else:
        fix = 'run it on a GPU machine, or add a CPU scenario (engine = "embedded", '
        fix += f'device = "cpu") to {machine.config.path}'
    return Check("gpus", FAIL, detail, int(ExitCode.INFRASTRUCTURE), fix)


def _gpu_fix(problem: GpuProblem) -> str:
    index = problem.gpu.index
    if problem.kind == "busy":
        return (
            f"wait for the work on GPU {index} to end, or stop it (`nvidia-smi` lists the "
            "processes; `perfgate runner job-completed` ends servers a perfgate job left behind)"
        )
    return (
        f"take this runner out of service until GPU {index} is healthy (`nvidia-smi -q -i "
        f"{index}` tells more; pending remaps and retirements clear with a GPU reset)"
    )


def _check_gpu_count(machine: Machine, scenario: Scenario, report: GpuReport) -> list[Check]:
    env = {**machine.environ, **scenario.env}
    visible = visible_gpus(report.gpus, listed_devices(env), strict=False)
    if scenario.tp <= len(visible):
        return []
    detail = f"{scenario.name} needs tp = {scenario.tp} GPUs; {len(visible)} visible"
    assert machine.config is not None
    fix = (
        f"run it on a machine with {scenario.tp} GPUs, widen CUDA_VISIBLE_DEVICES, or lower "
        f"scenarios.{scenario.name}.tp in {machine.config.path}"
    )
    return [Check("gpus", FAIL, detail, int(ExitCode.INFRASTRUCTURE), fix)]


def check_ports(machine: Machine) -> list[Check]:
    try:
        port = free_port()
    except OSError as error:
        detail = f"no free TCP port on 127.0.0.1 ({error.strerror}); the servers need one each"
        return [Check("ports", FAIL, detail, int(ExitCode.INFRASTRUCTURE), FIXES["ports"])]
    checks = [Check("ports", OK, f"free ports on 127.0.0.1 (e.g. {port})")]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if sock.connect_ex(("127.0.0.1", SGLANG_DEFAULT_PORT)) == 0:
            detail = (
                f"something listens on {SGLANG_DEFAULT_PORT}, SGLang's default port: a server "
                "left behind?"
            )
            fix = "`perfgate runner job-completed` ends this runner's"
            checks.append(Check("ports", WARN, detail, 0, fix))
    return checks


def check_history_db(machine: Machine) -> list[Check]:
    """The history must take a run's writes: proven by a write that is rolled back."""
    assert machine.selection is not None
    url = machine.selection.history_url
    parsed = parse_history_url(url)
    path = sqlite_path(parsed)
    try:
        done = probe_write(url)
    except PerfgateError as error:
        # The store's own errors name a fix where the fix is the user's (a file, a URL, a
        # permission); what is left is a server that does not answer, or a file held locked.
        held = "wait for the process that holds the file locked, or stop it"
        down = "start the history's database server, or fix the host and port in the URL"
        fix = f"{held if path is not None else down}; or point {ELSEWHERE} at another history"
        return [_fail("history", error, fix)]
    checks = [Check("history", OK, f"{describe(parsed)}: writable ({done})")]
    workspace = machine.environ.get("GITHUB_WORKSPACE")
    if path is not None and workspace and path.resolve().is_relative_to(Path(workspace).resolve()):
        detail = f"{path} is inside the job's checkout, which the next checkout cleans"
        fix = "set PERFGATE_DB_URL in the runner's environment (docs/runner-setup.md, History)"
        checks.append(Check("history", WARN, detail, 0, fix))
    return checks


def check_baselines(machine: Machine) -> list[Check]:
    """What each scenario's run will be judged against here, as `perfgate.reference` decides."""
    if not machine.options.gate:
        return [Check("baselines", OK, "not needed (--no-gate: runs are recorded, not judged)")]
    assert machine.selection is not None
    folder, profile = machine.selection.baselines_dir, machine.selection.profile
    gpus = machine.gpus or detect_gpus()
    strict = requires_baseline(machine.options.require_baseline, machine.environ)
    checks = []
    for scenario in machine.scenarios:
        name = f"baseline {scenario.name}"
        path = baseline_path(folder, profile, scenario.name)
        try:
            if not path.exists():
                checks.append(_no_baseline(name, path, scenario.name, profile, strict))
                continue
            baseline = load_baseline(path, profile=profile, scenario=scenario.name)
        except PerfgateError as error:
            checks.append(_fail(name, error, FIXES["baselines"]))
            continue
        judged = _judge_baseline(machine, name, scenario, baseline, gpus, strict, profile)
        checks.append(judged)
    return checks


def _no_baseline(name: str, path: Path, scenario: str, profile: str, strict: bool) -> Check:
    if strict:
        return _fail(name, missing_baseline(path, scenario, profile), "")
    detail = (
        f"no reviewed baseline for runner profile {profile} ({path}): the run will be judged "
        "against this machine's own history (earlier runs with the same fingerprint; the "
        "first one becomes the reference)"
    )
    return Check(name, OK, detail)


def _judge_baseline(
    machine: Machine,
    name: str,
    scenario: Scenario,
    baseline: Baseline,
    gpus: GpuInfo | None,
    strict: bool,
    profile: str,
) -> Check:
    """Whether a run here will match the reviewed baseline's fingerprint, field by field."""
    server = machine.servers.get(scenario.name)
    prediction = predict_fingerprint(scenario, server, gpus, machine.environ)
    differing = prediction.differences(baseline.fingerprint)
    fix = fix_commands(scenario.name, profile)
    if differing:
        fields = "; ".join(
            f"{f}: {old or 'unset'} -> {new or 'unset'}" for f, old, new in differing
        )
        measured = f"{baseline.path} was measured in another environment ({fields})"
        if strict:
            detail = (
                f"{measured}, and CI (or --require-baseline) judges only against a matching "
                "reviewed baseline"
            )
            return Check(name, FAIL, detail, int(ExitCode.BAD_INPUT), fix)
        detail = f"{measured}: the run will be judged against this machine's own history"
        return Check(name, WARN, detail, 0, f"for a reviewed baseline of this machine, {fix}")
    detail = (
        f"the run will be judged against the reviewed baseline {baseline.path} "
        f"({len(baseline.runs)} approved run(s)): its fingerprint matches this machine's"
    )
    if prediction.unchecked:
        unchecked = "; ".join(f"{f} ({why})" for f, why in prediction.unchecked.items())
        detail += f", but for fields a running server tells: {unchecked}"
    if unseen := machine_note(baseline, prediction.fingerprint):
        return Check(name, WARN, detail + unseen, 0, f"to add this machine's runs, {fix}")
    _, judged_by = machine_reference(baseline, prediction.fingerprint)
    return Check(name, OK, detail + judged_by)


def check_machine_state(machine: Machine) -> list[Check]:
    path = machine.environ.get(STATE_VARIABLE)
    if not path:
        return [
            Check("machine state", OK, f"{STATE_VARIABLE} unset (the job-started hook sets it)")
        ]
    if not os.path.isfile(path):
        detail = f"{STATE_VARIABLE}={path}: no such file"
        return [Check("machine state", WARN, detail, 0, FIXES["machine state"])]
    if not load_state_fingerprint(machine.environ):  # unreadable, not JSON, or no settings
        detail = f"{STATE_VARIABLE}={path}: holds no GPU settings job-started wrote"
        return [Check("machine state", WARN, detail, 0, FIXES["machine state"])]
    return [Check("machine state", OK, f"{path}: GPU settings go into the fingerprint")]


CHECKS: Sequence[tuple[str, Callable[[Machine], list[Check]]]] = (
    ("config", check_config),
    ("perfgate", check_python),
    ("engines", check_engines),
    ("weights", check_weights),
    ("gpus", check_gpus),
    ("ports", check_ports),
    ("history", check_history_db),
    ("baselines", check_baselines),
    ("machine state", check_machine_state),
)


def run_checks(options: GateOptions, environ: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in order; a config that cannot be read stops those that need it."""
    machine = Machine(options, os.environ if environ is None else environ)
    checks: list[Check] = []
    for name, check in CHECKS:
        if machine.config is None and name not in ("config", "perfgate", "ports", "machine state"):
            continue
        try:
            checks += check(machine)
        except PerfgateError as error:
            checks.append(_fail(name, error, FIXES[name]))
    return checks


def doctor_exit_code(checks: Sequence[Check]) -> ExitCode:
    """64 if any check needs the user to fix something, else 69 for the machine, else 0."""
    codes = {check.exit_code for check in checks if check.status == FAIL}
    for code in (ExitCode.BAD_INPUT, ExitCode.INFRASTRUCTURE):
        if code in codes:
            return code
    return ExitCode.INFRASTRUCTURE if codes else ExitCode.PASS
