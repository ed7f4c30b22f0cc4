"""perfgate's SGLang knowledge, proven against SGLang's real source.

For each checked release, the wheel is installed without dependencies and read with `ast`:
every probe target (module, class, method) of the table for that release exists, the targets
of other releases do not (so the ranges are right at the checked releases), every flag
perfgate's command lines carry is one SGLang's argument definitions declare, and every fact of
perfgate.sglang.facts holds exactly where it says. For the pinned release, the command lines
are also parsed by SGLang's own argument parser.

Checked releases: perfgate.sglang.facts.CHECKED_RELEASES, or `PERFGATE_SGLANG_RELEASES`
(a comma-separated list, or `all` for every release of the supported range in the cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.config import Scenario
from perfgate.engines.server_commands import MODES, server_command
from perfgate.probe.targets import SGLANG_TARGETS, ProbeTarget, select_targets
from perfgate.sglang import facts as facts
from perfgate.sglang.versions import parse_version

from ..hang import HANG_S
from . import sglang_source as source
from . import sglang_wheels

pytestmark = pytest.mark.sglang_source


def _releases() -> list[str]:
    wanted = os.environ.get("PERFGATE_SGLANG_RELEASES", "")
    if wanted == "all":
        cached = [p.name for p in sglang_wheels.cache_root().iterdir() if (p / "sglang").is_dir()]
        return sorted((v for v in cached if facts.SUPPORTED.contains(v)), key=parse_version)
    chosen = [v.strip() for v in wanted.split(",") if v.strip()]
    return chosen or list(dict.fromkeys([*facts.CHECKED_RELEASES, facts.PINNED]))


RELEASES = _releases()


@pytest.fixture(scope="session", params=RELEASES)
def tree(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(release, folder holding its `sglang` package)."""
    try:
        return request.param, sglang_wheels.install_release(request.param)
    except RuntimeError as error:
        pytest.fail(f"cannot install SGLang {request.param} to read its source: {error}")


def everything_scenario(**changes: object) -> Scenario:
    """A scenario that makes perfgate emit every flag it can."""
    base = Scenario(
        name="all-flags",
        engine="sglang",
        model="meta-llama/Llama-3.3-70B-Instruct",
        draft="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
        steps=3,
        topk=1,
        draft_tokens=4,
        tp=8,
        dtype="bfloat16",
        max_running_requests=8,
        engine_metrics=True,
        env={"NCCL_PROTO": "LL"},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def emitted_flags(release: str) -> set[str]:
    """Every flag in the spec and plain command lines perfgate builds for `release`."""
    known = facts.release(release)
    flags = set()
    for mode in MODES:
        command = server_command(everything_scenario(), mode, port=30000, sglang=known)
        flags |= {arg for arg in command.argv if arg.startswith("--")}
    return flags


# --- the checks, as functions returning problems (tested on a fake tree below) ------------


def target_problems(root: Path, release: str) -> list[str]:
    """Targets of this release that the source lacks, and others' targets it still has."""
    problems = []
    chosen = {t for mode in MODES for t in select_targets("sglang", release, mode)}
    for target in SGLANG_TARGETS:
        methods = source.class_methods(root, target.module).get(target.qualname)
        present = methods is not None and target.method in methods
        if target in chosen and not present:
            problems.append(f"missing: {_name(target)}")
        elif target not in chosen and present and not _also_chosen(target, chosen):
            problems.append(f"present although outside {target.versions}: {_name(target)}")
    return problems


def accepted_problems(root: Path, release: str) -> list[str]:
    """Accept targets of this release whose accepted drafts or rows no path of theirs reads:
    the field each path ends in is declared by no class of SGLang's managers or speculative
    code (perfgate.probe.targets.AcceptedDrafts)."""
    fields = source.annotated_fields(root, "managers", "speculative")
    problems = []
    for mode in MODES:
        for target in select_targets("sglang", release, mode):
            if target.accepted is None:
                continue
            for what, paths in (("counts", target.accepted.counts), ("rows", target.accepted.rows)):
                if not any(path.rsplit(".", 1)[-1] in fields for path in paths):
                    problems.append(f"{_name(target)}: no field for its {what} {paths}")
    return problems


def _name(target: ProbeTarget) -> str:
    return f"{target.module}.{target.qualname}.{target.method} ({target.phase})"


def _also_chosen(target: ProbeTarget, chosen: set[ProbeTarget]) -> bool:
    # The same method timed in the other mode (TpModelWorker: verify vs the plain cycle).
    return any(
        (t.module, t.qualname, t.method) == (target.module, target.qualname, target.method)
        for t in chosen
    )


def fact_problems(root: Path, release: str) -> list[str]:
    """Facts that should hold and do not, and facts that should be gone and are not."""
    found = {
        "flag": source.argparse_flags(root),
        "endpoint": source.http_routes(root),
        "meta_info": source.meta_info_keys(root),
        "env": source.environment_variables(root),
    }
    problems = []
    for fact in facts.FACTS:
        holds = fact.versions.contains(release)
        if fact.kind in found:
            present = fact.name in found[fact.kind]
        elif fact.kind == "literal":
            # The list the rule of the same role tests against (rule_page_tree for
            # page_tree_backends): where that rule holds, its list must be this one.
            rule = _rule_for(fact, release)
            present = rule is not None and tuple(fact.name.split(",")) in source.rule_literals(
                root, rule
            )
        else:
            matches = source.strings_containing(root, fact.name)
            present = fact.name in matches if fact.kind == "string" else bool(matches)
        if holds != present:
            state = "missing" if holds else f"present although outside {fact.versions}"
            problems.append(f"{state}: {fact.kind} {fact.name!r} ({fact.role})")
    return problems


def _rule_for(literal: facts.Fact, release: str) -> str | None:
    role = "rule_" + literal.role.removesuffix("_backends")
    rules = [f.name for f in facts.FACTS if f.role == role and f.versions.contains(release)]
    return rules[0] if rules else None


# --- the tests ------------------------------------------------------------------------------


def test_every_probe_target_exists_where_its_table_says(tree: tuple[str, Path]) -> None:
    release, root = tree
    assert not target_problems(root, release), f"SGLang {release}"


def test_every_accept_target_reads_fields_sglang_declares(tree: tuple[str, Path]) -> None:
    release, root = tree
    assert not accepted_problems(root, release), f"SGLang {release}"


def test_every_flag_perfgate_emits_is_declared_by_sglang(tree: tuple[str, Path]) -> None:
    release, root = tree
    declared = source.argparse_flags(root)
    assert len(declared) > 200, (
        "the reader found too few flags: SGLang changed how it declares them"
    )
    undeclared = sorted(emitted_flags(release) - declared)
    assert not undeclared, f"SGLang {release} does not declare {undeclared}"


def test_every_fact_holds_exactly_in_its_range(tree: tuple[str, Path]) -> None:
    release, root = tree
    assert not fact_problems(root, release), f"SGLang {release}"


# The checks fail when SGLang loses what perfgate relies on: a fake release shows it.
FAKE_WORKER = """
class EAGLEWorkerV2:
    def forward_batch_generation(self, batch): ...
    def verify(self, batch): ...

class EagleDraftWorker:
    def draft(self, batch): ...
"""


def test_a_lost_target_or_flag_is_reported(tmp_path: Path) -> None:
    speculative = tmp_path / "sglang" / "srt" / "speculative"
    speculative.mkdir(parents=True)
    (speculative / "eagle_worker_v2.py").write_text(FAKE_WORKER)  # no _draft_extend_for_decode
    (tmp_path / "sglang" / "srt" / "server_args.py").write_text(
        'def add_cli_args(parser):\n    parser.add_argument("--model-path", "--model")\n'
    )
    problems = target_problems(tmp_path, "0.5.23")
    assert (
        "missing: sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_decode (draft_extend)"
        in problems
    )
    assert any("TpModelWorker" in p for p in problems)
    assert source.argparse_flags(tmp_path) == {"--model-path", "--model"}
    assert "--speculative-num-steps" in emitted_flags("0.5.23") - source.argparse_flags(tmp_path)


def test_annotated_fields_are_read_as_sglang_reads_them(tmp_path: Path) -> None:
    fields = tmp_path / "sglang" / "srt" / "arg_groups" / "fields"
    fields.mkdir(parents=True)
    (tmp_path / "sglang" / "srt" / "server_args.py").write_text("")
    (fields / "spec.py").write_text(
        "class Spec:\n"
        '    speculative_num_steps: A[Optional[int], "help"] = None\n'
        '    tp_size: A[int, Arg(help="x", aliases=["--tensor-parallel-size"]), NS("p")] = 1\n'
        '    hidden: A[str, Arg(no_cli=True)] = ""\n'
        '    renamed: A[str, Arg(cli_name="--other-name")] = ""\n'
        "    plain: int = 0\n"
    )
    assert source.argparse_flags(tmp_path) == {
        "--speculative-num-steps",
        "--tp-size",
        "--tensor-parallel-size",
        "--other-name",
    }


# --- SGLang's own parser, on the pinned release ---------------------------------------------

PARSE_SCRIPT = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
parsed = [vars(parser.parse_args(argv)) for argv in json.loads(sys.argv[1])]
print(json.dumps(parsed, default=str))
"""


def parse_with_sglang(root: Path, deps: Path, argvs: list[list[str]]) -> list[dict[str, object]]:
    """Parse command lines with the pinned SGLang's real argument parser, in a subprocess.

    SGLang's tree goes first on the path, its small dependencies last (after this
    environment's torch and numpy, which they must not shadow).
    """
    bootstrap = f"import sys; sys.path.insert(0, {str(root)!r}); sys.path.append({str(deps)!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", bootstrap + PARSE_SCRIPT, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_sglang_parses_perfgate_command_lines() -> None:
    try:
        root = sglang_wheels.install_release(facts.PINNED)
        deps = sglang_wheels.install_parser_deps()
    except RuntimeError as error:
        pytest.fail(f"cannot install SGLang {facts.PINNED} and its parser's dependencies: {error}")
    known = facts.release(facts.PINNED)
    scenario = everything_scenario(extra_args=("--mem-fraction-static", "0.85"))
    commands = {m: server_command(scenario, m, port=30123, sglang=known) for m in MODES}
    argvs = [list(c.argv[3:]) for c in commands.values()]  # after `python -m sglang.launch_server`
    plain, spec = parse_with_sglang(root, deps, argvs)
    for parsed in (plain, spec):
        assert parsed["model_path"] == scenario.model
        assert (parsed["tp_size"], parsed["dtype"]) == (8, "bfloat16")
        assert (parsed["max_running_requests"], parsed["port"]) == (8, 30123)
        assert parsed["enable_metrics"] is True
        assert parsed["mem_fraction_static"] == 0.85
    assert plain["speculative_algorithm"] is None
    assert spec["speculative_algorithm"] == "EAGLE3"
    assert spec["speculative_draft_model_path"] == scenario.draft
    steps_topk_tokens = (spec["speculative_num_steps"], spec["speculative_eagle_topk"])
    assert (*steps_topk_tokens, spec["speculative_num_draft_tokens"]) == (3, 1, 4)


def test_the_embedded_only_flags_are_exactly_those_sglang_lacks(tree: tuple[str, Path]) -> None:
    from perfgate.engines.embedded.args import build_parser
    from perfgate.preflight import EMBEDDED_ONLY_FLAGS

    release, root = tree
    embedded = {
        flag
        for action in build_parser()._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    lacking = embedded - source.argparse_flags(root)
    added_later = {flag for flag, lacked in SGLANG_ADDED_LATER.items() if release in lacked}
    assert lacking == set(EMBEDDED_ONLY_FLAGS) | added_later, f"SGLang {release}"


# The embedded engine's flags that SGLang declares from a later release on, with the checked
# releases that lack them (an SGLang scenario passing one to those gets SGLang's own refusal).
SGLANG_ADDED_LATER = {
    "--cuda-graph-backend-prefill": ("0.5.6", "0.5.10.post1", "0.5.12.post1", "0.5.13"),
}


@pytest.mark.slow
def test_an_argument_sglang_does_not_know_is_bad_input_with_its_message(tmp_path: Path) -> None:
    from perfgate.engines.launch import free_port, start_server
    from perfgate.engines.server_commands import ServerCommand
    from perfgate.errors import ConfigError

    try:
        root = sglang_wheels.install_release(facts.PINNED)
        deps = sglang_wheels.install_parser_deps()
    except RuntimeError as error:
        pytest.fail(f"cannot install SGLang {facts.PINNED} and its parser's dependencies: {error}")
    # SGLang's own start: its argument parser first (argparse exits 2 on a flag it lacks).
    script = (
        f"import sys, time; sys.path.insert(0, {str(root)!r}); sys.path.append({str(deps)!r})\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "prepare_server_args(sys.argv[1:]); time.sleep(600)\n"
    )
    argv = (sys.executable, "-c", script, "--model-path", "org/m", "--num-threads", "1")
    command = ServerCommand("tp8", "sglang", "plain", argv, {}, "127.0.0.1", free_port())
    with pytest.raises(ConfigError) as caught:
        start_server(command, tmp_path / "log", startup_timeout_s=HANG_S)
    assert (
        "refused its arguments: sglang serve: error: unrecognized arguments: --num-threads 1"
        in (str(caught.value))
    )


def test_the_rules_perfgate_quotes_live_where_sglang_checks_its_arguments(
    tree: tuple[str, Path],
) -> None:
    # A ValueError raised there, exit 1, is reported as SGLang refusing its arguments (64).
    release, root = tree
    rules = [f for f in facts.FACTS if f.kind == "wording" and f.versions.contains(release)]
    assert rules
    for rule in rules:
        homes = {
            path.relative_to(root).as_posix()
            for path in (root / "sglang").rglob("*.py")
            if rule.name in path.read_text("utf-8", errors="replace")
        }
        assert homes, f"SGLang {release}: {rule.role} is nowhere"
        assert all(home.startswith(facts.ARGUMENT_CHECKS) for home in homes), (release, homes)


# --- the exported models (`perfgate embedded export`), against the model files SGLang loads --

EAGLE3_MODULE, EAGLE3_CLASS = "sglang.srt.models.llama_eagle3", "LlamaForCausalLMEagle3"
LLAMA_MODULE = "sglang.srt.models.llama"
# The Llama classes the EAGLE-3 draft's layer is built from, and those of the target.
DRAFT_LLAMA_CLASSES = ("LlamaDecoderLayer", "LlamaAttention", "LlamaMLP")
TARGET_LLAMA_CLASSES = ("LlamaForCausalLM", "LlamaModel", *DRAFT_LLAMA_CLASSES)
# Keys read without a default that an export need not write, and why.
NOT_NEEDED = {"intermediate_size_mlp": "read for llama4_text only", "__class__": "Python's own"}
# Keys read with a default (getattr/hasattr), and what the exports rely on: a release that
# reads a new one fails until its default is reviewed here.
DEFAULTED = {
    "target_hidden_size": "written: the target's hidden size",
    "eagle_config": "written: the aux hidden-state layer ids",
    "rope_parameters": "written (transformers 5)",
    "rope_theta": "written (transformers 4)",
    "head_dim": "written",
    "max_position_embeddings": "written: the target's context",
    "attention_bias": "written: false",
    "bias": "not written: false, fc has no bias",
    "rope_scaling": "not written: none",
    "original_max_position_embeddings": "not written: no scaling",
    "partial_rotary_factor": "not written: 1, the whole head rotates",
    "rope_is_neox_style": "not written: true, rotate_half (the embedded model's rotation)",
    "num_aux_hidden_states": "not written: the count of eagle_config's ids",
    "fc_norm": "not written: no norm before fc",
    "use_aux_norm": "not written: no norm before fc",
    "norm_before_fc": "not written: no norm before fc",
    "norm_output": "not written: the pre-norm hidden feeds the next step, as in the embedded head",
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped tiny pair, exported: {"target": folder, "draft": folder}."""
    from perfgate.engines.embedded.export import export_model

    out = tmp_path_factory.mktemp("export")
    return {
        "target": export_model("perfgate/llama-tiny", out / "target").folder,
        "draft": export_model("perfgate/eagle3-llama-tiny", out / "draft").folder,
    }


def _weight_names(folder: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return sorted(weights.keys())


def draft_weight_problems(root: Path, names: list[str]) -> list[str]:
    """Checkpoint names SGLang's EAGLE-3 model would drop without a word, and its parameters
    (or shards of stacked ones) that no name fills."""
    parameters, unknown = source.parameter_names(root, EAGLE3_MODULE, EAGLE3_CLASS)
    problems = [f"unreadable module {u}" for u in unknown]
    rules = source.load_rules(root, EAGLE3_MODULE, EAGLE3_CLASS)
    filled: dict[str, set[object]] = {}
    for name in names:
        loaded = source.loaded_parameter(name, rules, parameters)
        if loaded is None:
            problems.append(f"dropped: {name}")
        else:
            filled.setdefault(loaded[0], set()).add(loaded[1])
    shards = {
        param: {s for p, _, s in rules.stacked if p == param} for param, _, _ in rules.stacked
    }
    for parameter in sorted(parameters):
        wanted = next((s for p, s in shards.items() if p in parameter), {None})
        if filled.get(parameter, set()) != wanted:
            problems.append(
                f"unfilled: {parameter} (got {sorted(map(str, filled.get(parameter, set())))})"
            )
    return problems


def config_problems(
    root: Path, config: dict[str, object], scopes: list[tuple[str, tuple[str, ...] | None]]
) -> list[str]:
    """Keys the code reads that the config lacks, and defaulted keys nobody reviewed."""
    problems = []
    for module, classes in scopes:
        plain, defaulted = source.config_reads(root, module, classes)
        problems += [
            f"{module}: reads {k}, not written"
            for k in sorted(plain - set(config) - set(NOT_NEEDED))
        ]
        problems += [
            f"{module}: reads {k} with a default nobody reviewed"
            for k in sorted(defaulted - set(DEFAULTED))
        ]
    return problems


def test_the_exported_draft_fills_every_weight_of_sglangs_eagle3_model(
    tree: tuple[str, Path], exported: dict[str, Path]
) -> None:
    release, root = tree
    names = _weight_names(exported["draft"])
    assert "midlayer.self_attn.q_proj.weight" in names
    assert not draft_weight_problems(root, names), f"SGLang {release}"


def test_the_exported_configs_hold_every_key_sglang_reads(
    tree: tuple[str, Path], exported: dict[str, Path]
) -> None:
    release, root = tree
    draft = json.loads((exported["draft"] / "config.json").read_text())
    target = json.loads((exported["target"] / "config.json").read_text())
    assert draft["architectures"] == [EAGLE3_CLASS]
    assert source.class_methods(root, EAGLE3_MODULE).get(EAGLE3_CLASS), f"SGLang {release}"
    assert not config_problems(
        root, draft, [(EAGLE3_MODULE, None), (LLAMA_MODULE, DRAFT_LLAMA_CLASSES)]
    ), release
    assert not config_problems(root, target, [(LLAMA_MODULE, TARGET_LLAMA_CLASSES)]), release


def test_sglangs_llama_target_captures_aux_states_at_the_input_of_layer_id_plus_1(
    tree: tuple[str, Path],
) -> None:
    # What perfgate.sglang.facts.capturable_aux_layer_ids and the export's pass-through
    # layer rely on: id i is captured inside the loop over the layers, before layer i + 1, so
    # the last layer's output never is.
    release, root = tree
    assert source.capture_offsets(root) == ["val + 1"], f"SGLang {release}"
    assert source.capture_sites(root) == ["layer loop"], f"SGLang {release}"


FAKE_EAGLE3 = """
from sglang.srt.models.llama import LlamaDecoderLayer, LlamaForCausalLM

class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.fc = torch.nn.Linear(config.hidden_size * 3, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(1)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.extra = RMSNorm(getattr(config, "new_key", 4))

class LlamaForCausalLMEagle3(LlamaForCausalLM):
    def __init__(self, config):
        nn.Module.__init__(self)
        self.model = LlamaModel(config)
        self.lm_head = ParallelLMHead(config.draft_vocab_size, config.hidden_size)

    def load_weights(self, weights):
        stacked_params_mapping = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v")]
        for name, loaded_weight in weights:
            if "d2t" in name:
                continue
"""
FAKE_LLAMA = """
class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_id):
        super().__init__()
        self.self_attn = LlamaAttention(config)

class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(config.hidden_size)
        self.rotary_emb = get_rope(config.head_dim)

class LlamaForCausalLM(nn.Module):
    pass
"""


def test_a_release_that_stops_reading_the_exported_names_is_reported(
    tmp_path: Path, exported: dict[str, Path]
) -> None:
    # A release without the `midlayer` -> `layers.0` mapping drops the layer's weights without
    # a word (load_weights skips a name it does not know), and its new extra norm stays
    # unfilled; a key read with an unreviewed default is named.
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "llama_eagle3.py").write_text(FAKE_EAGLE3)
    (models / "llama.py").write_text(FAKE_LLAMA)
    problems = draft_weight_problems(tmp_path, _weight_names(exported["draft"]))
    assert "dropped: midlayer.self_attn.q_proj.weight" in problems
    assert "unfilled: model.extra.weight (got [])" in problems
    assert "unfilled: model.layers.0.self_attn.qkv_proj.weight (got [])" in problems
    assert not any("fc.weight" in p or "lm_head" in p for p in problems), problems
    draft = json.loads((exported["draft"] / "config.json").read_text())
    assert config_problems(tmp_path, draft, [(EAGLE3_MODULE, None)]) == [
        f"{EAGLE3_MODULE}: reads new_key with a default nobody reviewed"
    ]
