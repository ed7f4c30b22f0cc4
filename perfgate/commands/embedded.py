"""`perfgate embedded`: the embedded engine's own tools; `train` trains its models, `export`
writes them in the layout SGLang loads."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from perfgate.commands import add_command
from perfgate.engines.embedded.train_args import add_train_arguments
from perfgate.settings import Settings


def register(commands: Any) -> None:
    parser = add_command(commands, "embedded")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser(
        "train",
        help="train a target and its EAGLE-3 head from the stdlib docstrings: the shipped tiny "
        "pair, or the GPU configuration's large pair into this machine's model cache",
        description="Train a target and its EAGLE-3 head from this interpreter's "
        "standard-library docstrings and write them with a training.json recording the corpus, "
        "the recipe, the device, the losses and the seconds. --size tiny (the default) trains "
        "perfgate/llama-tiny and perfgate/eagle3-llama-tiny on the CPU (about 20 minutes on 2 "
        "cores) into --out. --size large --device cuda trains perfgate/llama-large and "
        "perfgate/eagle3-llama-large on one GPU (sized for about 5 minutes on an H200) into the "
        "model cache, where the embedded engine loads them from; run it once per machine. The "
        "same as `python -m perfgate.engines.embedded.train`.",
    )
    add_train_arguments(train)
    train.set_defaults(handler=handle_train)
    add_export(actions)


def add_export(actions: Any) -> None:
    export = actions.add_parser(
        "export",
        help="write a target as a Hugging Face LlamaForCausalLM folder, or an EAGLE-3 head as "
        "SGLang's LlamaForCausalLMEagle3 draft, for a real SGLang server",
        description="Write MODEL (a shipped name such as perfgate/llama-tiny, or a model "
        "folder) into OUTDIR in the layout SGLang loads: a target as a Hugging Face "
        "LlamaForCausalLM folder (config.json, model.safetensors, the byte-level tokenizer), "
        "an EAGLE-3 head as SGLang's LlamaForCausalLMEagle3 draft (its config keys, weight "
        "names and aux hidden-state layer ids, with copies of the target's embedding and LM "
        "head). OUTDIR is written whole or not at all, with a perfgate-export.json. The "
        "scenario sglang-tiny-eagle3 of perfgate.toml reads .perfgate/export/llama-tiny and "
        ".perfgate/export/eagle3-llama-tiny. See docs/sglang.md.",
    )
    export.add_argument("model", metavar="MODEL", help="the model to export")
    export.add_argument("outdir", metavar="OUTDIR", type=Path, help="the folder to write")
    export.add_argument(
        "--force",
        action="store_true",
        help="replace OUTDIR if it holds an earlier export (a folder with perfgate-export.json)",
    )
    export.add_argument(
        "--target",
        default=None,
        help="an EAGLE-3 head's target (default: the one its config.json names)",
    )
    export.add_argument(
        "--pass-through-layer",
        choices=("auto", "yes", "no"),
        default="auto",
        help="a target only: append a decoder layer that adds zero (the same logits), so that "
        "SGLang's Llama target can give a head the output of the last real layer, which it "
        "never captures; auto (the default) adds it when a shipped head of this target reads "
        "that layer (perfgate/llama-tiny's does)",
    )
    export.set_defaults(handler=handle_export)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def require_extra(command: str) -> None:
    """Refuse `command` (exit 64, naming the extra) where this interpreter lacks torch or
    safetensors, before anything is written."""
    from perfgate.preflight import EMBEDDED_NEEDS, refuse_without_embedded_extra

    missing = [name for name in EMBEDDED_NEEDS if importlib.util.find_spec(name) is None]
    refuse_without_embedded_extra(missing, sys.executable, command)


def handle_train(settings: Settings, args: argparse.Namespace) -> int:
    require_extra("perfgate embedded train")
    from perfgate.engines.embedded.train import run  # torch loads for this command only

    return run(args)


def handle_export(settings: Settings, args: argparse.Namespace) -> int:
    require_extra("perfgate embedded export")
    from perfgate.engines.embedded.export import export_model  # torch loads here only

    done = export_model(
        args.model,
        args.outdir,
        force=args.force,
        target=args.target,
        pass_through=args.pass_through_layer,
    )
    manifest = done.manifest
    what = f"{manifest['architecture']} of {manifest['exported_from']}"
    if done.kind == "target":
        what += f", {manifest['num_hidden_layers']} layers"
    else:
        what += f" (target {manifest['target']}), aux layer ids "
        what += ", ".join(map(str, manifest["eagle_aux_hidden_state_layer_ids"]))
    for note in done.notes:
        print(f"note: {note}")
    print(f"wrote {done.folder}: {what}")
    return 0
