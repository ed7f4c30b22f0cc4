"""Export the embedded engine's models to the folders SGLang loads.

A target (architecture ``llama``) becomes a Hugging Face ``LlamaForCausalLM`` folder:
``config.json`` with Hugging Face's keys, ``model.safetensors`` with its weight names, and the
byte-level tokenizer (``tokenizer.py``). The embedded model rotates the two halves of each
head (``apply_rope``: ``rotate_half``), as Hugging Face's Llama does, so the query and key rows
are copied as they are (``convert_llama_weights_to_hf`` permutes them only for checkpoints that
rotate interleaved pairs).

An EAGLE-3 head (architecture ``eagle3``) becomes SGLang's ``LlamaForCausalLMEagle3`` draft:
the names ``LlamaForCausalLMEagle3.load_weights`` reads (``midlayer.*``, which every supported
release maps onto its decoder layer, ``fc``, ``norm``, ``lm_head``, ``embed_tokens``), its
config keys, and the target's hidden states it reads as
``eagle_config.eagle_aux_hidden_state_layer_ids``. The embedded head shares the target's
embedding and LM head; the draft carries copies of both (``draft_vocab_size`` set, so SGLang
loads its LM head from the draft's file; the embedding SGLang replaces by the target's, the
same numbers). The draft vocabulary is the target's, so there is no ``d2t``/``t2d`` mapping.

The hidden states. SGLang's Llama target captures aux hidden state ``id`` at the input of
decoder layer ``id + 1`` (``perfgate.sglang.facts.capturable_aux_layer_ids``): the embedded
head's feature layer ``f`` (the residual stream after ``f`` layers) is id ``f - 1``, and the last
layer's output (``f = n_layer``) is never captured. A target whose shipped head reads its last
layer's output (``perfgate/llama-tiny``: feature layers 1, 2, 4 of 4) is therefore exported with
one *pass-through layer* appended: a decoder layer whose output projections are zero, so that
it adds exactly zero to the residual stream. The logits are the same numbers, and SGLang
captures the last real layer's output at that layer's input. It costs one more layer's work
in both twins. Feature layer 0 (the embeddings) SGLang cannot give at all: refused.

Every folder is written whole or not at all (a hidden folder beside it, renamed at the end),
with ``perfgate-export.json`` saying what it was exported from; ``--force`` replaces only a
folder that holds one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from perfgate.engines.embedded import tokenizer
from perfgate.engines.embedded.loading import (
    CONFIG_FILE,
    DRAFT_ARCHITECTURE,
    NAME_PREFIX,
    TARGET_ARCHITECTURE,
    WEIGHTS_FILE,
    ModelDir,
    draft_config,
    load_draft,
    load_target,
    model_identity,
    resolve_loadable,
    resolve_model,
    shipped_models,
    target_config,
)
from perfgate.engines.embedded.model import BYTE_VOCAB, DraftConfig, TargetConfig
from perfgate.errors import ConfigError
from perfgate.files import writable_folder
from perfgate.sglang.facts import capturable_aux_layer_ids

MANIFEST_FILE = "perfgate-export.json"
MANIFEST_FORMAT = 1
HF_TARGET_ARCHITECTURE = "LlamaForCausalLM"
SGLANG_DRAFT_ARCHITECTURE = "LlamaForCausalLMEagle3"
PASS_THROUGH_CHOICES = ("auto", "yes", "no")
# Where `perfgate embedded export` writes by default, and where perfgate.toml's SGLang
# scenario of the tiny pair looks: .perfgate/export/<folder of the shipped model>.
DEFAULT_EXPORT_DIR = Path(".perfgate", "export")

# One decoder layer's weights: the embedded name -> Hugging Face's (and SGLang's checkpoint's).
LAYER_NAMES = {
    "attention_norm.weight": "input_layernorm.weight",
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
}
# The head's own weights: the embedded name -> the name SGLang's EAGLE-3 checkpoints use.
DRAFT_NAMES = {
    "fc.weight": "fc.weight",
    "layer.embed_norm.weight": "midlayer.input_layernorm.weight",
    "layer.hidden_norm.weight": "midlayer.hidden_norm.weight",
    "layer.attention.wq.weight": "midlayer.self_attn.q_proj.weight",
    "layer.attention.wk.weight": "midlayer.self_attn.k_proj.weight",
    "layer.attention.wv.weight": "midlayer.self_attn.v_proj.weight",
    "layer.attention.wo.weight": "midlayer.self_attn.o_proj.weight",
    "layer.ffn_norm.weight": "midlayer.post_attention_layernorm.weight",
    "layer.feed_forward.w1.weight": "midlayer.mlp.gate_proj.weight",
    "layer.feed_forward.w3.weight": "midlayer.mlp.up_proj.weight",
    "layer.feed_forward.w2.weight": "midlayer.mlp.down_proj.weight",
    "norm.weight": "norm.weight",
}
# The target's weights the head shares, copied into the draft's file under these names.
SHARED_NAMES = {"tok_embeddings.weight": "embed_tokens.weight", "output.weight": "lm_head.weight"}


def target_weight_names(n_layer: int, tied: bool = False) -> dict[str, str]:
    """The embedded target's weight names -> Hugging Face's, for n_layer layers."""
    names = {"tok_embeddings.weight": "model.embed_tokens.weight"}
    for i in range(n_layer):
        names |= {
            f"layers.{i}.{ours}": f"model.layers.{i}.{hf}" for ours, hf in LAYER_NAMES.items()
        }
    names["norm.weight"] = "model.norm.weight"
    if not tied:
        names["output.weight"] = "lm_head.weight"
    return names


@dataclass(frozen=True)
class Export:
    """What one export wrote: the folder, its files, and what a reader should know."""

    folder: Path
    kind: str  # "target" or "eagle3"
    manifest: dict[str, Any]
    notes: tuple[str, ...] = ()


def export_model(
    name: str,
    out: Path,
    *,
    force: bool = False,
    target: str | None = None,
    pass_through: str = "auto",
) -> Export:
    """Export a target or an EAGLE-3 head of the embedded engine into folder out."""
    writable_folder(out.parent, f"the export {out}", "or choose another folder")
    model = resolve_loadable(name, "auto")
    if model.architecture == TARGET_ARCHITECTURE:
        if target is not None:
            raise ConfigError(
                "is for an EAGLE-3 head's export", field="--target", fix=f"drop it for {name}"
            )
        return export_target(model, out, force=force, pass_through=pass_through)
    return export_draft(model, out, force=force, target=target)


def export_target(
    model: ModelDir, out: Path, *, force: bool = False, pass_through: str = "auto"
) -> Export:
    """Write model as a Hugging Face LlamaForCausalLM folder (with a pass-through layer when
    ``pass_through`` is "yes", or "auto" and a shipped head reads its last layer's output)."""
    config = target_config(model)
    if config.vocab_size != BYTE_VOCAB:
        raise ConfigError(
            f"vocab_size is {config.vocab_size}; the exported tokenizer is perfgate's "
            f"byte-level one ({BYTE_VOCAB} tokens)",
            file=model.path / CONFIG_FILE,
            field="vocab_size",
        )
    added, why = _pass_through_layer(model, config, pass_through)
    tensors = _renamed(
        _weights(model), target_weight_names(config.n_layer, config.tie_embeddings), model
    )
    if added:
        tensors |= _pass_through_tensors(config, next(iter(tensors.values())).dtype)
    dtype = _dtype_name(tensors)
    manifest = _manifest(model, "target", HF_TARGET_ARCHITECTURE) | {
        "num_hidden_layers": config.n_layer + added,
        "pass_through_layer": f"model.layers.{config.n_layer}" if added else None,
    }
    files = {
        CONFIG_FILE: _json(hf_target_config(config, added, dtype)),
        **{n: t.encode("utf-8") for n, t in tokenizer.render_files(config.max_seq_len).items()},
    }
    _write_folder(out, files, tensors, manifest, force)
    return Export(out, "target", manifest, (why,) if why else ())


def hf_target_config(config: TargetConfig, pass_through: int, dtype: str) -> dict[str, Any]:
    """Hugging Face's LlamaConfig keys for the target (plus pass_through layers)."""
    return {
        "architectures": [HF_TARGET_ARCHITECTURE],
        "model_type": "llama",
        **_llama_keys(config, config.n_layer + pass_through, config.max_seq_len),
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "torch_dtype": dtype,
    }


def export_draft(
    model: ModelDir, out: Path, *, force: bool = False, target: str | None = None
) -> Export:
    """Write an EAGLE-3 head as SGLang's LlamaForCausalLMEagle3 draft of its target."""
    config = draft_config(model)
    target_name = target or model.config.get("target")
    if not target_name:
        raise ConfigError(
            "the head's config.json names no target",
            field="--target",
            fix="name the target the head was trained on (--target perfgate/llama-tiny)",
        )
    target_model = resolve_loadable(target_name, "auto")
    target_cfg = target_config(target_model)
    layer_ids = aux_layer_ids(config, target_cfg, model)
    head = _weights(model, target_model)
    shared = _weights(target_model, names=tuple(SHARED_NAMES))
    tensors = _renamed(head, DRAFT_NAMES, model)
    tensors["fc.weight"] = _ascending_features(tensors["fc.weight"], config.feature_layers)
    output = "tok_embeddings.weight" if target_cfg.tie_embeddings else "output.weight"
    tensors["embed_tokens.weight"] = shared["tok_embeddings.weight"].clone()
    tensors["lm_head.weight"] = shared[output].clone()
    dtype = _dtype_name(tensors)
    manifest = _manifest(model, "eagle3", SGLANG_DRAFT_ARCHITECTURE) | {
        "target": target_model.label,
        "target_identity": model_identity(target_name),
        "feature_layers": list(config.feature_layers),
        "eagle_aux_hidden_state_layer_ids": layer_ids,
    }
    document = sglang_draft_config(config, target_cfg, layer_ids, dtype)
    _write_folder(out, {CONFIG_FILE: _json(document)}, tensors, manifest, force)
    return Export(out, "eagle3", manifest)


def sglang_draft_config(
    config: DraftConfig, target: TargetConfig, layer_ids: list[int], dtype: str
) -> dict[str, Any]:
    """The config keys SGLang's LlamaForCausalLMEagle3 reads, for this head of target."""
    return {
        "architectures": [SGLANG_DRAFT_ARCHITECTURE],
        "model_type": "llama",
        **_llama_keys(config, 1, target.max_seq_len),
        "vocab_size": target.vocab_size,
        "draft_vocab_size": target.vocab_size,  # the draft file's own lm_head
        "target_hidden_size": target.dim,
        "tie_word_embeddings": False,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": layer_ids,
            "use_aux_hidden_state": True,
        },
        "torch_dtype": dtype,
    }


def aux_layer_ids(config: DraftConfig, target: TargetConfig, model: ModelDir) -> list[int]:
    """SGLang's aux hidden-state layer ids for the head's feature layers, in ascending order
    (the order SGLang's target captures them in): feature layer f is id f - 1.

    The last layer's output (id n_layer - 1) needs the pass-through layer of the target's
    export; the embeddings (feature layer 0) SGLang cannot capture.
    """
    layers = list(config.feature_layers)
    if config.dim != target.dim:
        raise ConfigError(
            f"the head's dim {config.dim} differs from its target's {target.dim}",
            file=model.path / CONFIG_FILE,
            field="dim",
            fix="export the head that was trained for this target",
        )
    if len(set(layers)) != len(layers):
        raise ConfigError(
            f"{layers} names a layer twice; SGLang captures each layer once, so the head "
            "would get fewer features than it reads",
            file=model.path / CONFIG_FILE,
            field="feature_layers",
            fix="train a head on three different layers, 1 and up",
        )
    outside = [f for f in layers if not 1 <= f <= target.n_layer]
    if outside:
        raise ConfigError(
            f"{layers}: {outside} cannot be given by SGLang's Llama target, which captures the "
            f"outputs of layers 1..{target.n_layer} only (0 is the embeddings)",
            file=model.path / CONFIG_FILE,
            field="feature_layers",
            fix="train a head on three different layers, 1 and up",
        )
    return [f - 1 for f in sorted(layers)]


def reads_uncapturable(head: ModelDir, target: ModelDir) -> bool:
    """Whether head is trained on target and reads a hidden state that SGLang's Llama target
    of the same layers cannot capture (its last layer's output)."""
    if head.config.get("target") != target.label:
        return False
    capturable = capturable_aux_layer_ids(int(target.config["n_layer"]))
    return any(f - 1 not in capturable for f in head.config.get("feature_layers", ()) if f > 0)


# --- the pieces ------------------------------------------------------------------------------


def _pass_through_layer(model: ModelDir, config: TargetConfig, choice: str) -> tuple[int, str]:
    """(1 or 0 layers to append, why) for --pass-through-layer CHOICE."""
    if choice not in PASS_THROUGH_CHOICES:
        raise ConfigError(
            f"is {choice!r}", field="--pass-through-layer", fix=f"use {PASS_THROUGH_CHOICES}"
        )
    if choice != "auto":
        return int(choice == "yes"), ""
    heads = [resolve_model(name) for name in shipped_models()]
    readers = [
        h.label
        for h in heads
        if h.architecture == DRAFT_ARCHITECTURE and reads_uncapturable(h, model)
    ]
    if not readers:
        return 0, ""
    return 1, (
        f"{', '.join(readers)} reads the output of {model.label}'s last layer ({config.n_layer}), "
        "which SGLang's Llama target captures only at the input of a following layer: the "
        f"export appends a pass-through layer (layer {config.n_layer + 1}, zero output "
        "projections: the same logits) so that SGLang gives the head that hidden state "
        f"(aux layer id {config.n_layer - 1}); --pass-through-layer no leaves it out"
    )


def _weights(
    model: ModelDir, target: ModelDir | None = None, names: tuple[str, ...] | None = None
) -> dict[str, Tensor]:
    """The model's own tensors as the embedded engine saves them (seeded where it has none);
    only `names` of them if given (a large target's embedding and LM head, not its 2.4 GB)."""
    if model.weights is not None and names is not None:
        with safe_open(str(model.weights), "pt") as weights:
            present = set(weights.keys())
            return {n: weights.get_tensor(n) for n in names if n in present}
    if model.weights is not None:
        return load_file(str(model.weights))
    cpu = torch.device("cpu")
    if target is None:
        return {k: v.detach() for k, v in load_target(str(model.path), cpu, torch.float32)
                .state_dict().items()}  # fmt: skip
    built = load_target(str(target.path), cpu, torch.float32)
    head = load_draft(str(model.path), built, cpu, torch.float32)
    return {k: v.detach() for k, v in head.state_dict().items()}


def _renamed(
    tensors: Mapping[str, Tensor], names: Mapping[str, str], model: ModelDir
) -> dict[str, Tensor]:
    missing = sorted(set(names) - set(tensors))
    if missing:
        raise ConfigError(
            f"the weights lack {missing[:3]} (not a model of this perfgate's architecture)",
            file=model.weights or model.path,
        )
    return {hf: tensors[ours].contiguous() for ours, hf in names.items()}


def _pass_through_tensors(config: TargetConfig, dtype: torch.dtype) -> dict[str, Tensor]:
    """A decoder layer that adds zero to the residual stream: its attention's and MLP's output
    projections (and, for clarity, their inputs) are zero, its norms one."""
    dim, ffn = config.dim, config.ffn_dim
    shapes = {
        "attention.wq": (dim, dim), "attention.wk": (dim, dim), "attention.wv": (dim, dim),
        "attention.wo": (dim, dim), "feed_forward.w1": (ffn, dim), "feed_forward.w3": (ffn, dim),
        "feed_forward.w2": (dim, ffn),
    }  # fmt: skip
    prefix = f"model.layers.{config.n_layer}."
    tensors = {
        prefix + LAYER_NAMES[f"{name}.weight"]: torch.zeros(shape, dtype=dtype)
        for name, shape in shapes.items()
    }
    for norm in ("attention_norm.weight", "ffn_norm.weight"):
        tensors[prefix + LAYER_NAMES[norm]] = torch.ones(dim, dtype=dtype)
    return tensors


def _ascending_features(fc: Tensor, layers: tuple[int, ...]) -> Tensor:
    """fc's input columns reordered from the head's feature order to ascending layers (SGLang
    concatenates the captured states in layer order)."""
    dim = fc.shape[1] // len(layers)
    blocks = torch.split(fc, dim, dim=1)
    order = sorted(range(len(layers)), key=lambda i: layers[i])
    return torch.cat([blocks[i] for i in order], dim=1).contiguous()


def _llama_keys(config: TargetConfig | DraftConfig, layers: int, context: int) -> dict[str, Any]:
    return {
        "hidden_size": config.dim,
        "intermediate_size": config.ffn_dim,
        "num_hidden_layers": layers,
        "num_attention_heads": config.n_head,
        "num_key_value_heads": config.n_head,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": context,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},
        "attention_bias": False,
        "mlp_bias": False,
        # A byte vocabulary has no special tokens; LlamaConfig's defaults (1, 2) would make
        # byte 2 an end of sequence.
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def _dtype_name(tensors: Mapping[str, Tensor]) -> str:
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"mixed dtypes {sorted(map(str, dtypes))}")
    return str(dtypes.pop()).removeprefix("torch.")


def _manifest(model: ModelDir, kind: str, architecture: str) -> dict[str, Any]:
    from perfgate.version import perfgate_version

    return {
        "format": MANIFEST_FORMAT,
        "kind": kind,
        "architecture": architecture,
        "exported_from": model.label,
        "identity": model_identity(_name(model)),
        "perfgate": perfgate_version(),
    }


def _name(model: ModelDir) -> str:
    """The name that finds model again: its shipped name, else its folder."""
    return model.label if model.label.startswith(NAME_PREFIX) else str(model.path)


def _json(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


# --- writing a folder whole or not at all -----------------------------------------------------


def _write_folder(
    out: Path,
    files: Mapping[str, bytes],
    tensors: Mapping[str, Tensor],
    manifest: Mapping[str, Any],
    force: bool,
) -> None:
    _refuse_existing(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _partial_folder(out) as partial:
        for name, data in files.items():
            (partial / name).write_bytes(data)
        save_file(dict(tensors), str(partial / WEIGHTS_FILE), metadata={"format": "pt"})
        (partial / MANIFEST_FILE).write_bytes(_json(manifest))
        _readable(partial)
        _replace(out, partial)


def _refuse_existing(out: Path, force: bool) -> None:
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise ConfigError(
            "exists", field=str(out), fix="pass --force to replace it, or choose another folder"
        )
    if not out.is_dir() or out.is_symlink() or not (out / MANIFEST_FILE).is_file():
        raise ConfigError(
            f"exists and holds no {MANIFEST_FILE}: --force replaces only a folder perfgate "
            "exported",
            field=str(out),
            fix="remove it yourself, or choose another folder",
        )


@contextmanager
def _partial_folder(out: Path) -> Iterator[Path]:
    """A hidden folder beside out to write into; removed if the export fails."""
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield partial
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _readable(folder: Path) -> None:
    """Give the folder and its files the modes the umask allows (mkdtemp makes it private)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _replace(out: Path, partial: Path) -> None:
    """Move the finished partial folder to out, replacing a previous export there."""
    if not out.exists():
        partial.rename(out)
        return
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(old)
    try:
        partial.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
