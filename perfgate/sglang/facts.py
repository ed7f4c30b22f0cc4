"""What perfgate knows about SGLang, as data keyed by release ranges.

Every fact perfgate relies on (a flag it emits, an endpoint it calls, a `meta_info` key it
reads, an environment variable, a metric name, the wording of a rule it enforces before
launch) is one `Fact` with the releases it holds for. `tests/engines/test_sglang_source.py`
installs SGLang wheels and checks, with `ast`, that every fact holds in each checked release
and that a fact marked as gone is gone: the ranges are proven, not remembered. The probe's
method tables live beside the embedded engine's, in `perfgate/probe/targets.py`, keyed the
same way.

To support a new SGLang release, see "Supporting a new SGLang release" in docs/sglang.md.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from perfgate.errors import ConfigError
from perfgate.sglang.versions import VersionRange, parse_version

# The releases perfgate runs against: a version outside this range is refused before launch.
SUPPORTED = VersionRange(">=0.5.6,<0.5.24")
# The releases that still have spec v1 (`EAGLEWorker`, speculative/eagle_worker.py).
SPEC_V1_RELEASES = VersionRange(">=0.5.6,<0.5.13")
# The release CI parses perfgate's command lines with (SGLang's own argument parser).
PINNED = "0.5.23"
# Releases whose source CI reads on every run: the oldest, both sides of spec v1's removal
# (0.5.13), and some between, besides PINNED. `PERFGATE_SGLANG_RELEASES=all` checks every
# installed release, and so proves every range's ends (tests/engines/test_sglang_source.py).
# 0.5.14 and 0.5.16 pin torch 2.11.0, the H200 image's: the releases a live run can use there.
CHECKED_RELEASES = (
    "0.5.6",
    "0.5.10.post1",
    "0.5.12.post1",
    "0.5.13",
    "0.5.14",
    "0.5.16",
    "0.5.20",
    "0.5.23",
)

# Where SGLang checks its arguments: `ServerArgs` in srt/server_args.py and, from 0.5.13, the
# resolution hooks of srt/arg_groups/. A ValueError or AssertionError raised through them, before
# the server is up (exit 1), is SGLang refusing its arguments; argparse's refusal exits 2.
# tests/engines/test_sglang_source.py proves that every rule perfgate quotes lives there.
ARGUMENT_CHECKS = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")

FactKind = Literal["flag", "endpoint", "meta_info", "env", "string", "wording", "literal"]


@dataclass(frozen=True)
class Fact:
    """One thing perfgate relies on, under the role perfgate gives it, and where it holds.

    `kind` says where the source test looks: `flag` in SGLang's argument definitions,
    `endpoint` in the HTTP server's routes, `meta_info` among the keys the tokenizer
    manager assigns, `env` in `srt/environ.py`, `string` as an exact string constant,
    `wording` inside a string constant or f-string (the text of an error or warning),
    `literal` as a list or tuple of strings (`name` joined by commas).
    """

    kind: FactKind
    role: str
    name: str
    versions: VersionRange = SUPPORTED


def _since(version: str) -> VersionRange:
    return VersionRange(f">={version},{_upper()}")


def _upper() -> str:
    return next(f"<{v}" for op, v in SUPPORTED.bounds() if op == "<")


# Rules of SGLang's speculative-argument checks that perfgate applies before launch, quoted.
RULE_DRAFT_TOKENS = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)
RULE_TRTLLM_TOPK = "trtllm_mha backend only supports topk = 1 for speculative decoding."
RULE_PAGE_TREE_OLD = (
    "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect "
    "results for paged attention backends. This combination is only supported for the "
    "'flashinfer' backend."
)
RULE_PAGE_TREE = "speculative_eagle_topk > 1 with page_size > 1 is only supported on "

FACTS: tuple[Fact, ...] = (
    # The flags perfgate emits, and the ones its checks read from pass-through arguments.
    Fact("flag", "model", "--model-path"),
    Fact("flag", "model", "--model"),
    Fact("flag", "tp", "--tp-size"),
    Fact("flag", "tp", "--tensor-parallel-size"),
    Fact("flag", "dtype", "--dtype"),
    Fact("flag", "max_running_requests", "--max-running-requests"),
    Fact("flag", "host", "--host"),
    Fact("flag", "port", "--port"),
    Fact("flag", "algorithm", "--speculative-algorithm"),
    Fact("flag", "draft", "--speculative-draft-model-path"),
    Fact("flag", "draft", "--speculative-draft-model"),
    Fact("flag", "steps", "--speculative-num-steps"),
    Fact("flag", "topk", "--speculative-eagle-topk"),
    Fact("flag", "draft_tokens", "--speculative-num-draft-tokens"),
    Fact("flag", "metrics", "--enable-metrics"),
    Fact("flag", "attention_backend", "--attention-backend"),
    Fact("flag", "attention_backend", "--decode-attention-backend"),
    Fact("flag", "attention_backend", "--prefill-attention-backend"),
    Fact("flag", "page_size", "--page-size"),
    Fact("flag", "device", "--device"),
    # Endpoints; for a role with several names, the first that answers is used.
    Fact("endpoint", "generate", "/generate"),
    Fact("endpoint", "health", "/health"),
    Fact("endpoint", "flush_cache", "/flush_cache"),
    # Wait up to this many seconds for an idle scheduler (perfgate.engines.client.flush_cache).
    Fact("endpoint", "flush_cache_timeout", "/flush_cache?timeout", _since("0.5.10")),
    Fact("endpoint", "server_info", "/server_info"),
    Fact("endpoint", "server_info", "/get_server_info"),
    Fact("string", "metrics_endpoint", "/metrics"),
    # Per-request meta_info: the newest name of a role first.
    Fact("meta_info", "verify_ct", "spec_verify_ct"),
    Fact("meta_info", "accept_length", "spec_accept_length"),
    Fact("meta_info", "accept_rate", "spec_accept_rate"),
    Fact("meta_info", "correct_drafts", "spec_num_correct_drafts", _since("0.5.12")),
    Fact("meta_info", "correct_drafts", "spec_accepted_drafts", VersionRange(">=0.5.11,<0.5.21")),
    Fact("meta_info", "correct_drafts", "spec_accept_token_num", VersionRange(">=0.5.6,<0.5.11")),
    Fact("meta_info", "proposed_drafts", "spec_num_proposed_drafts", _since("0.5.12")),
    Fact("meta_info", "proposed_drafts", "spec_proposed_drafts", VersionRange(">=0.5.11,<0.5.21")),
    Fact("meta_info", "proposed_drafts", "spec_draft_token_num", VersionRange(">=0.5.6,<0.5.11")),
    Fact("meta_info", "histogram", "spec_correct_drafts_histogram", _since("0.5.12")),
    Fact("meta_info", "histogram", "spec_accept_histogram", VersionRange(">=0.5.9,<0.5.21")),
    Fact("meta_info", "token_logprobs", "output_token_logprobs"),
    Fact("meta_info", "top_logprobs", "output_top_logprobs"),
    # Teacher forcing (perfgate.teacher): the input tokens' logprobs from logprob_start_len.
    Fact("meta_info", "input_token_logprobs", "input_token_logprobs"),
    Fact("meta_info", "input_top_logprobs", "input_top_logprobs"),
    # GPU time per forward category (Prometheus, with --enable-metrics and the variable).
    Fact("env", "device_timer", "SGLANG_ENABLE_METRICS_DEVICE_TIMER", _since("0.5.7")),
    Fact("string", "device_time", "sglang:forward_execution_seconds_total", _since("0.5.11")),
    Fact(
        "string",
        "device_time",
        "sglang:gpu_execution_seconds_total",
        VersionRange(">=0.5.7,<0.5.11"),
    ),
    Fact("string", "verify_calls", "sglang:spec_verify_calls_total", _since("0.5.13")),
    # Which EAGLE worker runs: v1 exists below 0.5.13; SGLANG_ENABLE_SPEC_V2 is read below 0.5.14.
    Fact("env", "spec_v2_switch", "SGLANG_ENABLE_SPEC_V2", VersionRange(">=0.5.6,<0.5.14")),
    # Where the switch is off (its default below 0.5.11), the speculative server runs without
    # the overlap scheduler; 0.5.11 to 0.5.12.post1 also fall back to spec v1 for trees
    # ("spec v2 currently only supports topk = 1"). perfgate.engines.server_commands schedules the
    # plain twin the same way.
    Fact(
        "env", "spec_v2_default_off", "SGLANG_ENABLE_SPEC_V2=False", VersionRange(">=0.5.6,<0.5.11")
    ),
    Fact(
        "env", "spec_v2_default_on", "SGLANG_ENABLE_SPEC_V2=True", VersionRange(">=0.5.11,<0.5.14")
    ),
    Fact(
        "wording",
        "spec_tree_without_overlap",
        "spec v2 currently only supports topk = 1",
        VersionRange(">=0.5.11,<0.5.13"),
    ),
    Fact("flag", "no_overlap", "--disable-overlap-schedule"),
    # The rules perfgate enforces before launch.
    Fact("wording", "rule_draft_tokens", RULE_DRAFT_TOKENS),
    Fact("wording", "rule_trtllm_topk", RULE_TRTLLM_TOPK),
    Fact("wording", "rule_page_tree", RULE_PAGE_TREE_OLD, VersionRange(">=0.5.6,<0.5.13")),
    Fact("literal", "page_tree_backends", "flashinfer,fa3", VersionRange(">=0.5.6,<0.5.13")),
    Fact("wording", "rule_page_tree", RULE_PAGE_TREE, _since("0.5.13")),
    Fact("literal", "page_tree_backends", "flashinfer,fa3,triton", _since("0.5.13")),
    # An EAGLE-3 draft's config.json: which target hidden states it reads
    # (perfgate.engines.embedded.export writes them; preflight checks them against the target).
    Fact("string", "eagle_config", "eagle_config"),
    Fact("string", "eagle_aux_layers", "eagle_aux_hidden_state_layer_ids"),
    Fact("string", "eagle3_draft_architecture", "LlamaForCausalLMEagle3"),
)

# The target architectures whose capture of EAGLE-3 hidden states `capturable_aux_layer_ids`
# describes: srt/models/llama.py's `LlamaModel`.
LLAMA_TARGETS = ("LlamaForCausalLM",)


def capturable_aux_layer_ids(num_hidden_layers: int) -> range:
    """The EAGLE-3 aux hidden-state layer ids SGLang's Llama target can give a draft.

    `set_eagle3_layers_to_capture` adds 1 to each id, and `LlamaModel.forward` captures the
    residual stream at the input of those layers, inside its loop over them: id i is the
    output of decoder layer i (0-based). The last layer's output (id num_hidden_layers - 1) is
    never captured, and id -1 (the embeddings) adds a residual that does not exist yet (up to
    0.5.20; perfgate refuses it in every release). tests/engines/test_sglang_source.py proves
    the loop and the +1 in every checked release.
    """
    return range(0, num_hidden_layers - 1)


@dataclass(frozen=True)
class SglangRelease:
    """The facts that hold for one installed SGLang release."""

    version: str
    facts: tuple[Fact, ...]

    def names(self, role: str) -> tuple[str, ...]:
        """Every name of `role` in this release, newest first; empty if it has none."""
        return tuple(f.name for f in self.facts if f.role == role)

    def name(self, role: str) -> str:
        """The name of `role` in this release (the newest, where there are aliases)."""
        names = self.names(role)
        if not names:
            raise LookupError(f"SGLang {self.version} has no {role!r} (see perfgate.sglang.facts)")
        return names[0]

    def has(self, role: str) -> bool:
        return bool(self.names(role))


def release(version: str, *, field: str = "sglang") -> SglangRelease:
    """The knowledge for `version`; a ConfigError if perfgate does not support it."""
    try:
        parsed = parse_version(version)
    except ValueError as error:
        raise ConfigError(str(error), field=field) from None
    if not SUPPORTED.contains(parsed):
        raise ConfigError(
            f"SGLang {version} is outside the releases perfgate supports ({SUPPORTED})",
            field=field,
            fix=f"install a supported release (CI checks {PINNED}), or add this one: "
            "docs/sglang.md, 'Supporting a new SGLang release'",
        )
    return SglangRelease(version, tuple(f for f in FACTS if f.versions.contains(parsed)))


def all_names(role: str) -> tuple[str, ...]:
    """Every name `role` has had in any supported release, newest first (for parsing)."""
    names: list[str] = []
    for fact in FACTS:
        if fact.role == role and fact.name not in names:
            names.append(fact.name)
    return tuple(names)


# --- the installed release, read from the scenario's interpreter without importing SGLang --

_PROBE_SCRIPT = """
import json
from importlib import metadata
found = {}
for name in ("sglang", "torch", "safetensors"):
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


@dataclass(frozen=True)
class InstalledVersions:
    """Package versions installed in one interpreter; None where a package is absent."""

    python: str
    sglang: str | None
    torch: str | None
    safetensors: str | None = None


def installed_versions(
    python: str, env: Mapping[str, str] | None = None, timeout_s: float = 60.0
) -> InstalledVersions:
    """Ask `python`, in the server's environment `env`, which sglang, torch and safetensors it
    has (package metadata only: nothing is imported)."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE_SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=None if env is None else dict(env),
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise ConfigError(
            f"cannot run {python}: {error}", field="python", fix="point it at a Python interpreter"
        ) from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"{python} failed: {tail[0]}", field="python", fix="fix the interpreter")
    found = json.loads(done.stdout)
    return InstalledVersions(python, found["sglang"], found["torch"], found.get("safetensors"))


def require_sglang(versions: InstalledVersions, where: str) -> SglangRelease:
    """The knowledge for the SGLang installed in the interpreter; refuse a missing one."""
    if versions.sglang is None:
        raise ConfigError(
            f"SGLang is not installed in {versions.python}",
            field=where,
            fix=f"pip install sglang=={PINNED} there, or set {where} to SGLang's interpreter",
        )
    return release(versions.sglang, field=where)
