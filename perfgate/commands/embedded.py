"""`perfgate embedded`: the embedded engine's own tools; `train` trains its models."""

from __future__ import annotations

import argparse
import importlib.util
import sys
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


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def handle_train(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.engines.validate import EMBEDDED_NEEDS, refuse_without_embedded_extra

    missing = [name for name in EMBEDDED_NEEDS if importlib.util.find_spec(name) is None]
    refuse_without_embedded_extra(missing, sys.executable, "perfgate embedded train")
    from perfgate.engines.embedded.train import run  # torch loads for this command only

    return run(args)
