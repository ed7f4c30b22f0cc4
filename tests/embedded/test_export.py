"""`perfgate embedded export`: the embedded models in the layout SGLang loads.

The export round-trips (every tensor back, bit for bit, under its new name); Hugging Face's
LlamaForCausalLM, reading the exported target, gives the embedded engine's logits on the
default prompts and hands out the hidden states SGLang would capture for the head; the draft,
run as SGLang's LlamaForCausalLMEagle3 computes (its `forward`, written out here in its own
names), gives the embedded head's logits. Which names and keys SGLang reads is proven against
its source in tests/engines/test_sglang_source.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor

from perfgate.engines.embedded import export
from perfgate.engines.embedded.loading import MODELS_DIR, load_draft, load_target
from perfgate.engines.embedded.tokenizer import FILES as TOKENIZER_FILES
from perfgate.prompts import load_prompt_set

from ..in_process import perfgate_main
from .common import CPU, DRAFT, TARGET

# fp32 on a CPU: the two implementations sum in different orders (Hugging Face's rotary
# frequencies, attention and norms are written differently); measured differences are about
# 1e-5 of logits of magnitude ~10.
LOGITS_ATOL = 1e-4


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny pair exported by the command, as a user runs it."""
    out = tmp_path_factory.mktemp("export")
    for name, folder in ((TARGET, "target"), (DRAFT, "draft")):
        done = perfgate_main("embedded", "export", name, str(out / folder), cwd=out)
        assert done.returncode == 0, done.stderr
    return {"target": out / "target", "draft": out / "draft", "log": out}


def _embedded(folder: str) -> dict[str, Tensor]:
    return load_file(str(MODELS_DIR / folder / "model.safetensors"))


def test_the_target_round_trips_with_a_pass_through_layer(folders: dict[str, Path]) -> None:
    ours = _embedded("llama-tiny")
    theirs = load_file(str(folders["target"] / "model.safetensors"))
    names = export.target_weight_names(4)
    assert {theirs_name: torch.equal(theirs[theirs_name], ours[name]) for name, theirs_name in
            names.items()} == dict.fromkeys(names.values(), True)  # fmt: skip
    extra = sorted(set(theirs) - set(names.values()))
    assert extra == sorted(f"model.layers.4.{n}" for n in export.LAYER_NAMES.values())
    for name in extra:  # the pass-through layer: zero projections, unit norms
        value = 1.0 if name.endswith("layernorm.weight") else 0.0
        assert torch.equal(theirs[name], torch.full_like(theirs[name], value)), name
    config = json.loads((folders["target"] / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["head_dim"]) == (5, 128, 32)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["eos_token_id"] is None
    for name in TOKENIZER_FILES:  # perfgate's byte-level tokenizer, as the target ships it
        assert (folders["target"] / name).read_bytes() == (
            MODELS_DIR / "llama-tiny" / name
        ).read_bytes()
    manifest = json.loads((folders["target"] / export.MANIFEST_FILE).read_text())
    assert (
        manifest["exported_from"] == TARGET and manifest["pass_through_layer"] == "model.layers.4"
    )


def test_the_draft_round_trips_with_the_targets_shared_weights(folders: dict[str, Path]) -> None:
    head, target = _embedded("eagle3-llama-tiny"), _embedded("llama-tiny")
    theirs = load_file(str(folders["draft"] / "model.safetensors"))
    expected = {hf: head[name] for name, hf in export.DRAFT_NAMES.items()}
    expected |= {hf: target[name] for name, hf in export.SHARED_NAMES.items()}
    assert sorted(theirs) == sorted(expected)
    assert all(torch.equal(theirs[name], value) for name, value in expected.items())
    config = json.loads((folders["draft"] / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 3]
    assert (config["num_hidden_layers"], config["draft_vocab_size"]) == (1, 256)
    assert (config["hidden_size"], config["target_hidden_size"]) == (128, 128)


def test_the_command_says_why_it_adds_the_pass_through_layer(tmp_path: Path) -> None:
    done = perfgate_main("embedded", "export", TARGET, "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reads the output of perfgate/llama-tiny's last layer (4)" in done.stdout
    assert done.stdout.strip().endswith("LlamaForCausalLM of perfgate/llama-tiny, 5 layers")
    without = perfgate_main(
        "embedded", "export", TARGET, "plain", "--pass-through-layer", "no", cwd=tmp_path
    )
    assert without.returncode == 0 and "4 layers" in without.stdout
    assert "note:" not in without.stdout


def test_features_reorder_into_the_ascending_layers_sglang_concatenates() -> None:
    torch.manual_seed(0)
    fc = torch.randn(8, 24)
    low, mid, high = (torch.randn(2, 8) for _ in range(3))
    # A head trained on layers (4, 1, 2) reads [h4, h1, h2]; SGLang hands it [h1, h2, h4].
    ordered = export._ascending_features(fc, (4, 1, 2))
    assert torch.allclose(
        torch.cat([high, low, mid], -1) @ fc.T, torch.cat([low, mid, high], -1) @ ordered.T
    )


# --- bad input: exit 64 with the fix, nothing half-written -----------------------------------


def _refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = perfgate_main("embedded", "export", *args, cwd=tmp_path, env=env)
    assert done.returncode == 64, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


def test_an_unknown_model_is_refused_naming_the_shipped_ones(tmp_path: Path) -> None:
    line = _refused(tmp_path, "perfgate/llama-huge", "out")
    assert "no such model" in line and "perfgate/llama-tiny" in line
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_replaced_only_when_it_is_an_export_and_with_force(
    tmp_path: Path,
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert _refused(tmp_path, TARGET, "mine").endswith(
        "mine: exists; pass --force to replace it, or choose another folder"
    )
    assert "holds no perfgate-export.json" in _refused(tmp_path, TARGET, "mine", "--force")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert perfgate_main("embedded", "export", TARGET, "out", cwd=tmp_path).returncode == 0
    again = perfgate_main("embedded", "export", DRAFT, "out", "--force", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "out" / "config.json").read_text())["num_hidden_layers"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "out"]  # no partial left


def test_a_folder_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("kept")
    assert _refused(tmp_path, TARGET, "file/out") == (
        "perfgate: error: file: is a file, so the export file/out cannot be created under it; "
        "move that file away, or choose another folder"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "save_file", full_disk)
    with pytest.raises(OSError):
        export.export_model(TARGET, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_an_untrained_large_model_is_refused_naming_the_training(tmp_path: Path) -> None:
    line = _refused(
        tmp_path, "perfgate/llama-large", "out", env={"PERFGATE_MODEL_CACHE": str(tmp_path / "c")}
    )
    assert "no trained weights on this machine" in line
    assert "perfgate embedded train --size large --device cuda" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("layers", "problem"),
    [
        ([0, 2, 4], "[0] cannot be given by SGLang's Llama target"),
        ([1, 2, 2], "names a layer twice"),
    ],
)
def test_a_head_reading_states_sglang_cannot_give_is_refused(
    tmp_path: Path, layers: list[int], problem: str
) -> None:
    head = tmp_path / "head"
    head.mkdir()
    config = json.loads((MODELS_DIR / "eagle3-llama-tiny" / "config.json").read_text())
    (head / "config.json").write_text(json.dumps(config | {"feature_layers": layers}))
    line = _refused(tmp_path, str(head), "out")
    assert line.startswith(f"perfgate: error: {head / 'config.json'}:feature_layers: ")
    assert problem in line and line.endswith("train a head on three different layers, 1 and up")
    assert not (tmp_path / "out").exists()


# --- the numbers: Hugging Face's Llama, and SGLang's EAGLE-3 forward -------------------------


def _default_prompts() -> list[Tensor]:
    return [torch.tensor([list(p.encode())]) for p in load_prompt_set("default")]


@pytest.mark.slow  # importing transformers takes seconds
def test_hugging_face_gives_the_embedded_logits_and_the_states_sglang_captures(
    folders: dict[str, Path],
) -> None:
    from transformers import LlamaForCausalLM

    ours = load_target(TARGET, CPU, torch.float32)
    theirs = LlamaForCausalLM.from_pretrained(str(folders["target"]), dtype=torch.float32).eval()
    ids = json.loads((folders["draft"] / "config.json").read_text())["eagle_config"]
    ids = ids["eagle_aux_hidden_state_layer_ids"]
    worst = 0.0
    for tokens in _default_prompts():
        positions = torch.arange(tokens.shape[1]).unsqueeze(0)
        with torch.no_grad():
            logits, hidden = ours(tokens, positions, None, capture=(1, 2, 4))
            out = theirs(tokens, output_hidden_states=True)
        worst = max(worst, (out.logits - logits).abs().max().item())
        # SGLang captures id i at the input of layer i + 1: Hugging Face's hidden state i + 1.
        for i, state in zip(ids, hidden, strict=True):
            assert torch.allclose(out.hidden_states[i + 1], state, atol=LOGITS_ATOL), i
    assert worst <= LOGITS_ATOL, worst


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Neox-style rotary embedding (SGLang's `get_rope(..., is_neox_style=True)`), x [T, H, D]."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    first, second = x[..., : dim // 2], x[..., dim // 2 :]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def sglang_eagle3_forward(
    w: dict[str, Tensor], config: dict[str, object], tokens: Tensor, features: Tensor
) -> tuple[Tensor, Tensor]:
    """LlamaForCausalLMEagle3's forward over one causal sequence (SGLang 0.5.16,
    srt/models/llama_eagle3.py), on the draft's checkpoint names: (logits, aux hidden)."""
    eps, heads = float(config["rms_norm_eps"]), int(config["num_attention_heads"])  # type: ignore[call-overload]
    layer = "midlayer."
    embeds = w["embed_tokens.weight"][tokens]
    hidden = features @ w["fc.weight"].T  # shape[-1] differs from the embeddings': fc
    residual = hidden
    x = torch.cat(
        [_rms(embeds, w[layer + "input_layernorm.weight"], eps),
         _rms(hidden, w[layer + "hidden_norm.weight"], eps)], dim=-1,
    )  # fmt: skip
    length = tokens.shape[0]
    q, k, v = (
        (x @ w[f"{layer}self_attn.{p}_proj.weight"].T).view(length, heads, -1) for p in "qkv"
    )
    positions = torch.arange(length)
    q, k = (
        _rope(q, positions, float(config["rope_theta"])),
        _rope(k, positions, float(config["rope_theta"])),
    )  # type: ignore[arg-type]
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(length, length).triu(1).bool(), float("-inf"))
    attention = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(length, -1)
    residual = attention @ w[layer + "self_attn.o_proj.weight"].T + residual
    h = _rms(residual, w[layer + "post_attention_layernorm.weight"], eps)
    gate, up = h @ w[layer + "mlp.gate_proj.weight"].T, h @ w[layer + "mlp.up_proj.weight"].T
    residual = (F.silu(gate) * up) @ w[layer + "mlp.down_proj.weight"].T + residual
    return _rms(residual, w["norm.weight"], eps) @ w["lm_head.weight"].T, residual


def test_the_draft_computed_as_sglang_does_gives_the_embedded_heads_logits(
    folders: dict[str, Path],
) -> None:
    target = load_target(TARGET, CPU, torch.float32)
    head = load_draft(DRAFT, target, CPU, torch.float32)
    weights = load_file(str(folders["draft"] / "model.safetensors"))
    config = json.loads((folders["draft"] / "config.json").read_text())
    tokens = _default_prompts()[0]
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    with torch.no_grad():
        _, hidden = target(tokens, positions, None, capture=head.config.feature_layers)
        features = torch.cat(hidden, dim=-1)
        # The head's input at position i: token i + 1 with the target's features at i.
        shifted = tokens[:, 1:]
        logits, out = head(shifted, head.fuse(features[:, :-1]), positions[:, :-1])
        theirs, aux = sglang_eagle3_forward(weights, config, shifted[0], features[0, :-1])
    assert (theirs - logits[0]).abs().max().item() <= LOGITS_ATOL
    assert (aux - out[0]).abs().max().item() <= LOGITS_ATOL


def test_models_without_weights_export_their_seeded_weights(tmp_path: Path) -> None:
    # A model folder of config.json alone is seeded from its seed, as the engine loads it.
    for name in ("llama-tiny", "eagle3-llama-tiny"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_bytes(
            (MODELS_DIR / name / "config.json").read_bytes()
        )
    target, head = tmp_path / "llama-tiny", tmp_path / "eagle3-llama-tiny"
    export.export_model(str(target), tmp_path / "t", pass_through="no")
    export.export_model(str(head), tmp_path / "d", target=str(target))
    seeded = load_target(str(target), CPU, torch.float32)
    theirs = load_file(str(tmp_path / "t" / "model.safetensors"))
    assert torch.equal(
        theirs["model.layers.3.mlp.down_proj.weight"], seeded.layers[3].feed_forward.w2.weight
    )
    drafted = load_file(str(tmp_path / "d" / "model.safetensors"))
    assert torch.equal(drafted["lm_head.weight"], seeded.output.weight)
    assert torch.equal(
        drafted["fc.weight"], load_draft(str(head), seeded, CPU, torch.float32).fc.weight
    )
