"""Checks before any server starts: a TP8 model can take many minutes to load, so a mistake
must be refused in seconds, with one line that names the field and the fix.

`check_scenario` needs no machine (SGLang's rules for steps/topk/draft tokens, the flags
perfgate owns); `preflight` looks at this machine (the interpreter and its SGLang release,
model paths, GPUs) and returns notes on what it could not check.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.config import Scenario
from perfgate.devices import Gpu
from perfgate.engines import embedded
from perfgate.engines import sglang as sglang_facts
from perfgate.engines.gpu_memory import check_gpus_for, query_gpus
from perfgate.engines.server_commands import OWNED_ROLES, flag_names
from perfgate.engines.sglang import InstalledVersions, SglangRelease
from perfgate.errors import ConfigError

PASS_THROUGH = ("extra_args", "spec_extra_args", "plain_extra_args")
# The embedded engine's flags that no SGLang release declares (the others are SGLang's own);
# tests/engines/test_sglang_source.py proves the list against every checked release.
EMBEDDED_ONLY_FLAGS = (
    "--num-threads",
    "--debug-verify-delay-ms",
    "--debug-slow-phase",
    "--debug-simulate-accept-rate",
    "--debug-eagle3-feature-layers",
)
EMBEDDED_MODELS = Path(embedded.__file__).parent / "models"
EMBEDDED_PREFIX = "perfgate/"


def _where(scenario: Scenario, key: str) -> str:
    return f"scenarios.{scenario.name}.{key}"


def check_scenario(
    scenario: Scenario, file: Path | None = None, sglang: SglangRelease | None = None
) -> list[str]:
    """Refuse what SGLang would refuse or silently change; return notes for the rest."""
    refuse_embedded_only(scenario, file)
    names = flag_names(scenario, sglang)
    _refuse_owned_flags(scenario, file, names)
    return _check_speculative(scenario, file, names)


def refuse_embedded_only(scenario: Scenario, file: Path | None = None) -> None:
    """Refuse, for SGLang, a scenario that names the embedded engine's own models or flags (an
    embedded scenario run with `--engine sglang`, say): SGLang would refuse them at launch."""
    if scenario.engine != "sglang":
        return
    models = [
        f"{key} {value}"
        for key in ("model", "draft")
        if (value := getattr(scenario, key)).startswith(EMBEDDED_PREFIX)
        and (EMBEDDED_MODELS / value.removeprefix(EMBEDDED_PREFIX) / "config.json").is_file()
    ]
    flags = [
        f"{flag} ({key})"
        for key in PASS_THROUGH
        for arg in getattr(scenario, key)
        if (flag := arg.split("=", 1)[0]) in EMBEDDED_ONLY_FLAGS
    ]
    if not models and not flags:
        return
    named = [*models, *([f"flags {', '.join(flags)}"] if flags else [])]
    raise ConfigError(
        f"SGLang cannot run the embedded engine's own {', '.join(named)}",
        file=file,
        field=f"scenarios.{scenario.name}",
        fix="run it with --engine embedded, or write an SGLang scenario",
    )


def _refuse_owned_flags(scenario: Scenario, file: Path | None, names: SglangRelease) -> None:
    owned = {name: role for role in OWNED_ROLES for name in names.names(role)}
    for key in PASS_THROUGH:
        for arg in getattr(scenario, key):
            flag = arg.split("=", 1)[0]
            if flag in owned:
                instead = OWNED_ROLES[owned[flag]]
                fix = (
                    f"remove it: {instead}"
                    if instead.startswith("(")
                    else f"set {_where(scenario, instead)} instead"
                )
                raise ConfigError(
                    f"passes {flag}, which perfgate sets on both servers itself",
                    file=file,
                    field=_where(scenario, key),
                    fix=fix,
                )


def _flag_value(args: Sequence[str], flags: Sequence[str]) -> str | None:
    """The last value given to any of `flags` in `args` (`--f v` or `--f=v`)."""
    value = None
    for i, arg in enumerate(args):
        name, _, inline = arg.partition("=")
        if name in flags:
            value = inline if inline else (args[i + 1] if i + 1 < len(args) else None)
    return value


def _check_speculative(scenario: Scenario, file: Path | None, names: SglangRelease) -> list[str]:
    steps, topk, tokens = scenario.steps, scenario.topk, scenario.draft_tokens
    if topk == 1 and tokens != steps + 1:
        raise ConfigError(
            f"is {tokens} with topk = 1; SGLang would not run it: "
            f"'{sglang_facts.RULE_DRAFT_TOKENS}'",
            file=file,
            field=_where(scenario, "draft_tokens"),
            fix=f"set draft_tokens = {steps + 1} (steps + 1)",
        )
    if topk == 1:
        return []
    args = [*scenario.extra_args, *scenario.spec_extra_args]
    backends = [_flag_value(args, [flag]) for flag in names.names("attention_backend")]
    if "trtllm_mha" in backends:
        raise ConfigError(
            f"is {topk} with the trtllm_mha attention backend; SGLang says: "
            f"'{sglang_facts.RULE_TRTLLM_TOPK}'",
            file=file,
            field=_where(scenario, "topk"),
            fix="set topk = 1, or pick another --attention-backend",
        )
    return _check_page_tree(scenario, file, names, args, backends[0])


def _check_page_tree(
    scenario: Scenario,
    file: Path | None,
    names: SglangRelease,
    args: Sequence[str],
    backend: str | None,
) -> list[str]:
    page_size = _flag_value(args, names.names("page_size"))
    allowed = names.name("page_tree_backends").split(",")
    if page_size is None or page_size == "1":
        return []
    if backend is None:
        return [
            f"{scenario.name}: topk > 1 with --page-size {page_size}: SGLang refuses it unless "
            f"the attention backend it picks is one of {', '.join(allowed)}"
        ]
    if backend not in allowed:
        raise ConfigError(
            f"is {scenario.topk} with --page-size {page_size} and --attention-backend "
            f"{backend}; SGLang says: '{names.name('rule_page_tree')}...'",
            file=file,
            field=_where(scenario, "topk"),
            fix=f"set topk = 1, --page-size 1, or an attention backend of {', '.join(allowed)}",
        )
    return []


# --- this machine ----------------------------------------------------------------------


@dataclass(frozen=True)
class Preflight:
    """What the machine checks found: the engine's release, the GPUs to use, notes."""

    sglang: SglangRelease | None
    installed: InstalledVersions | None
    gpus: tuple[Gpu, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def engine_version(self) -> str | None:
        return self.sglang.version if self.sglang else None


def preflight(
    scenario: Scenario, file: Path | None = None, environ: Mapping[str, str] | None = None
) -> Preflight:
    """Check the interpreter, the SGLang release, model paths and GPUs; refuse what fails."""
    env = {**(os.environ if environ is None else environ), **scenario.env}
    python = scenario.python or sys.executable
    _check_python(scenario, file, python)
    installed = sglang_facts.installed_versions(python, env)
    if scenario.engine != "sglang":
        notes = check_scenario(scenario, file) + probe_notes(scenario, None)
        notes += serving_notes(scenario, env)
        return Preflight(None, installed, notes=tuple(notes))
    refuse_embedded_only(scenario, file)
    release = sglang_facts.require_sglang(installed, _where(scenario, "python"))
    notes = check_scenario(scenario, file, release)
    notes += _check_model_paths(scenario, file)
    notes += probe_notes(scenario, release.version) + serving_notes(scenario, env)
    gpus: list[Gpu] = []
    if scenario.device != "cpu":
        where = f"{_where(scenario, 'env')}.CUDA_VISIBLE_DEVICES"
        gpus = check_gpus_for(scenario.tp, env, where, query_gpus())
    return Preflight(release, installed, tuple(gpus), tuple(notes))


def probe_notes(scenario: Scenario, version: str | None) -> list[str]:
    """A note when the probe has no phase table for the scenario's algorithm, saying what a
    run records without it."""
    from perfgate.probe.targets import UNTIMED_PHASES, untimed_reason

    flags = (*scenario.extra_args, *scenario.spec_extra_args)
    reason = untimed_reason(scenario.engine, version, scenario.algorithm, flags)
    if reason is None:
        return []
    recorded = "output tok/s and accept length" + (", serving figures" if scenario.serving else "")
    return [
        f"{scenario.name}: {reason}: the run records {recorded}, not the phases "
        f"({UNTIMED_PHASES}), so phase metrics and the attribution of changes are absent"
    ]


def serving_notes(scenario: Scenario, env: Mapping[str, str]) -> list[str]:
    """Whether SGLang's serving benchmark will cross-check perfgate's serving figures."""
    from perfgate.serving.measure import cross_check_python

    if scenario.serving is None or scenario.serving.cross_check == "off":
        return []
    python = cross_check_python(scenario, env)
    if python is None:
        where = scenario.serving.cross_check_python or scenario.python or sys.executable
        return [
            f"{scenario.name}: no SGLang in {where}: serving figures from perfgate's load "
            "generator only (no sglang.benchmark.serving cross-check)"
        ]
    return [
        f"{scenario.name}: sglang.benchmark.serving ({python}) cross-checks the serving figures"
    ]


def _check_python(scenario: Scenario, file: Path | None, python: str) -> None:
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ConfigError(
            f"{python} is not an executable file",
            file=file,
            field=_where(scenario, "python"),
            fix="point it at the Python interpreter that has SGLang (e.g. /opt/sglang/bin/python)",
        )


def _check_model_paths(scenario: Scenario, file: Path | None) -> list[str]:
    notes = []
    for key in ("model", "draft"):
        value = getattr(scenario, key)
        path = Path(value).expanduser()
        if path.exists():
            if not (path / "config.json").is_file():
                raise ConfigError(
                    f"{value} is a local path without a config.json",
                    file=file,
                    field=_where(scenario, key),
                    fix="point it at a model folder (the one that holds config.json)",
                )
        elif value.startswith(("/", "./", "../", "~")):
            raise ConfigError(
                f"{value} does not exist",
                file=file,
                field=_where(scenario, key),
                fix="fix the path, or give a Hugging Face id (org/name)",
            )
        else:
            notes.append(
                f"{scenario.name}: {key} {value!r} is not a local folder; taken as a Hugging "
                "Face id, which cannot be checked offline: SGLang fetches it (or finds it in "
                "the HF cache) when it starts"
            )
    return notes
