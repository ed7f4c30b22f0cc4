"""Checks before any server starts: a TP8 model can take many minutes to load, so a mistake
must be refused in seconds, with one line that names the field and the fix.

`check_scenario` needs no machine (SGLang's rules for steps/topk/draft tokens, the flags
perfgate owns); `preflight` looks at this machine (the interpreter and its SGLang release,
model paths, GPUs) and returns notes on what it could not check.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from perfgate.config import Scenario
from perfgate.devices import Gpu
from perfgate.engines import embedded
from perfgate.engines.embedded import choices
from perfgate.engines.gpu_memory import check_gpus_for, query_gpus
from perfgate.engines.server_commands import OWNED_ROLES, flag_names
from perfgate.errors import ConfigError
from perfgate.sglang import facts as sglang_facts
from perfgate.sglang.facts import InstalledVersions, SglangRelease
from perfgate.spec import slowdown

PASS_THROUGH = ("extra_args", "spec_extra_args", "plain_extra_args")
# The embedded engine's flags that no SGLang release declares (the others are SGLang's own);
# tests/engines/test_sglang_source.py proves the list against every checked release.
EMBEDDED_ONLY_FLAGS = (
    "--num-threads",
    "--debug-verify-delay-ms",
    "--debug-slow-phase",
    "--debug-simulate-accept-rate",
    "--debug-eagle3-feature-layers",
    "--debug-rank-exit",
    "--debug-time-verify-widths",
)
EMBEDDED_MODELS = Path(embedded.__file__).parent / "models"
EMBEDDED_PREFIX = "perfgate/"
# A Hugging Face model id: a name, or an owner and a name; neither starts with '.' or '-'.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
# What the embedded engine's servers import that perfgate's core does not: the extra
# `perfgate[embedded]` (pyproject.toml) brings them.
EMBEDDED_EXTRA = "perfgate[embedded]"
EMBEDDED_INSTALL = f"pip install '{EMBEDDED_EXTRA}'"
EMBEDDED_NEEDS = ("torch", "safetensors")


def _where(scenario: Scenario, key: str) -> str:
    return f"scenarios.{scenario.name}.{key}"


def check_scenario(
    scenario: Scenario,
    file: Path | None = None,
    sglang: SglangRelease | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Refuse what SGLang (or the embedded server) would refuse or silently change; return
    notes for the rest. `environ`: what the servers inherit (default: this process's)."""
    refuse_embedded_only(scenario, file)
    _check_embedded_choices(scenario, file, os.environ if environ is None else environ)
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


def _check_embedded_choices(
    scenario: Scenario, file: Path | None, environ: Mapping[str, str]
) -> None:
    """Refuse, for the embedded engine, an algorithm, dtype or device its server has no choice
    for, or a slowdown it cannot read: its parser would refuse them after the launch, in the
    terms of its flags."""
    if scenario.engine != "embedded":
        return
    arguments = {key: getattr(scenario, key) for key in PASS_THROUGH}
    slowdown.check_settings(scenario.name, environ, scenario.env, arguments, file)
    given = (
        ("algorithm", scenario.algorithm.upper(), choices.SPEC_ALGORITHMS),
        ("dtype", scenario.dtype, ("auto", *choices.DTYPE_NAMES)),
        ("device", scenario.device, choices.DEVICES),
    )
    for key, value, allowed in given:
        if value is not None and value not in allowed:
            raise ConfigError(
                f"the embedded engine has no {key} {value!r}",
                file=file,
                field=_where(scenario, key),
                fix=f"use one of {', '.join(allowed)}",
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
    where = f"{_where(scenario, 'env')}.CUDA_VISIBLE_DEVICES"
    if scenario.engine != "sglang":
        require_embedded_extra(scenario, file, installed)
        notes = check_scenario(scenario, file, environ=environ) + probe_notes(scenario, None)
        notes += serving_notes(scenario, env)
        watched, gpu_notes = embedded_gpus(scenario, env, where)
        return Preflight(None, installed, watched, tuple(notes + gpu_notes))
    refuse_embedded_only(scenario, file)
    release = sglang_facts.require_sglang(installed, _where(scenario, "python"))
    notes = check_scenario(scenario, file, release)
    notes += _check_model_paths(scenario, file)
    _check_draft_fits_target(scenario, file)
    notes += probe_notes(scenario, release.version) + serving_notes(scenario, env)
    gpus: list[Gpu] = []
    if scenario.device != "cpu":
        gpus = check_gpus_for(scenario.tp, env, where, query_gpus())
    return Preflight(release, installed, tuple(gpus), tuple(notes))


def embedded_gpus(
    scenario: Scenario, env: Mapping[str, str], where: str
) -> tuple[tuple[Gpu, ...], list[str]]:
    """The GPUs an embedded server will load onto, checked as SGLang's are (enough of them,
    none busy), so that each launch waits for the last one's memory; none on the CPU.

    Where no GPU can be read (no NVML, no nvidia-smi) there is nothing to wait for: on
    `device = "cuda"` a note says so; on `auto` the server may well run on the CPU.
    """
    if scenario.device == "cpu":
        return (), []
    found = query_gpus()
    if found is None:
        if scenario.device != "cuda":
            return (), []
        return (), [
            f"{scenario.name}: no NVML or nvidia-smi here, so perfgate cannot wait for a "
            "server's GPU memory to be released before the next launch"
        ]
    if not found and scenario.device != "cuda":
        return (), []
    return tuple(check_gpus_for(scenario.tp, env, where, found)), []


def require_embedded_extra(
    scenario: Scenario, file: Path | None, installed: InstalledVersions
) -> None:
    """Refuse an embedded scenario whose interpreter lacks the engine's extra (torch,
    safetensors): its servers would die importing them."""
    if scenario.engine != "embedded":
        return
    found = {"torch": installed.torch, "safetensors": installed.safetensors}
    missing = [name for name in EMBEDDED_NEEDS if found[name] is None]
    refuse_without_embedded_extra(missing, installed.python, _where(scenario, "engine"), file)


def require_embedded_extra_here(scenario: Scenario, file: Path | None = None) -> None:
    """Refuse, before anything starts, an embedded scenario whose servers would run in this
    interpreter without the engine's extra (read from package metadata: nothing imported).

    A scenario run by another interpreter, or with its own PYTHONPATH, is left to
    :func:`preflight`, which asks the server's interpreter itself.
    """
    if scenario.engine != "embedded" or scenario.python or "PYTHONPATH" in scenario.env:
        return
    missing = [name for name in EMBEDDED_NEEDS if not _distribution_here(name)]
    refuse_without_embedded_extra(missing, sys.executable, _where(scenario, "engine"), file)


def _distribution_here(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def refuse_without_embedded_extra(
    missing: Sequence[str], python: str, where: str, file: Path | None = None
) -> None:
    """Refuse what needs the embedded engine where `python` lacks the `missing` packages."""
    if not missing:
        return
    raise ConfigError(
        f"the embedded engine needs {' and '.join(missing)}, which {python} does not "
        f"have: they come with the extra {EMBEDDED_EXTRA}",
        file=file,
        field=where,
        fix=f"{EMBEDDED_INSTALL} in that environment, or run an SGLang scenario",
    )


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
        elif value.startswith(("/", "./", "../", "~")) or not HUB_ID.fullmatch(value):
            raise ConfigError(
                f"{value} does not exist",
                file=file,
                field=_where(scenario, key),
                fix=_missing_folder_fix(value),
            )
        else:
            notes.append(
                f"{scenario.name}: {key} {value!r} is not a local folder; taken as a Hugging "
                "Face id, which cannot be checked offline: SGLang fetches it (or finds it in "
                "the HF cache) when it starts"
            )
    return notes


def _missing_folder_fix(value: str) -> str:
    """How to make a missing model folder: the export of the shipped model of its name."""
    name = Path(value).name
    if (EMBEDDED_MODELS / name / "config.json").is_file():
        return (
            f"export it first: perfgate embedded export {EMBEDDED_PREFIX}{name} {value} "
            "(paths are taken from the folder perfgate runs in)"
        )
    return "fix the path, or give a Hugging Face id (org/name)"


def _local_config(value: str, name: str = "config.json") -> tuple[Path, dict[str, object]] | None:
    """A JSON file of a local model folder, read; None where there is none."""
    path = Path(value).expanduser() / name
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot be read as JSON ({error})", file=path) from None
    return (path, document) if isinstance(document, dict) else None


def _check_draft_fits_target(scenario: Scenario, file: Path | None) -> None:
    """Refuse, from the two local config.json files, an EAGLE-3 draft that cannot read its
    target: another hidden size or vocabulary, or aux hidden states SGLang's Llama target never
    captures (perfgate.sglang.facts.capturable_aux_layer_ids)."""
    target, draft = _local_config(scenario.model), _local_config(scenario.draft)
    if target is None or draft is None or scenario.algorithm.upper() != "EAGLE3":
        return
    (target_file, t), (draft_file, d) = target, draft
    text = t.get("text_config") if isinstance(t.get("text_config"), dict) else t
    assert isinstance(text, dict)
    width_key = "target_hidden_size" if "target_hidden_size" in d else "hidden_size"
    for key, target_key in ((width_key, "hidden_size"), ("vocab_size", "vocab_size")):
        ours, theirs = d.get(key), text.get(target_key)
        if theirs is not None and ours is not None and theirs != ours:
            raise ConfigError(
                f"is {ours}, the target's {target_key} is {theirs} ({target_file}): SGLang "
                "feeds the draft the target's hidden states and embedding",
                file=draft_file,
                field=key,
                fix=f"point {_where(scenario, 'draft')} at the EAGLE-3 head trained for this "
                "target (`perfgate embedded export` writes the pair)",
            )
    _check_aux_layers(scenario, (target_file, text), (draft_file, d))


def _check_aux_layers(
    scenario: Scenario,
    target: tuple[Path, dict[str, object]],
    draft: tuple[Path, dict[str, object]],
) -> None:
    (target_file, t), (draft_file, d) = target, draft
    eagle = d.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    layers = t.get("num_hidden_layers")
    architectures = t.get("architectures")
    if (
        not isinstance(ids, list)
        or not isinstance(layers, int)
        or not isinstance(architectures, list)
        or not set(architectures) <= set(sglang_facts.LLAMA_TARGETS)
    ):
        return
    capturable = sglang_facts.capturable_aux_layer_ids(layers)
    never = [i for i in ids if i not in capturable]
    if not never:
        return
    fix = "use a draft trained on hidden states the target gives"
    manifest = _local_config(scenario.model, "perfgate-export.json")
    if manifest is not None:
        fix = (
            "export the target again with its pass-through layer: perfgate embedded export "
            f"{manifest[1].get('exported_from', 'MODEL')} {scenario.model} --force "
            "--pass-through-layer yes"
        )
    raise ConfigError(
        f"eagle_config.eagle_aux_hidden_state_layer_ids {ids}: SGLang's Llama target of "
        f"{layers} layers ({target_file}) captures ids {capturable.start} to "
        f"{capturable.stop - 1} only (id i at the input of layer i + 1), so {never} would "
        "never reach the draft",
        file=draft_file,
        field="eagle_config.eagle_aux_hidden_state_layer_ids",
        fix=fix,
    )
