"""`perfgate embedded`: the embedded engine's own tools; `train` rebuilds its shipped models."""

from __future__ import annotations

import argparse
from typing import Any

from perfgate.commands import add_command
from perfgate.engines.embedded.train_args import add_train_arguments
from perfgate.settings import Settings


def register(commands: Any) -> None:
    parser = add_command(commands, "embedded")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser(
        "train",
        help="train the shipped tiny target and its EAGLE-3 head from the stdlib docstrings",
        description="Train perfgate/llama-tiny and perfgate/eagle3-llama-tiny from this "
        "interpreter's standard-library docstrings, on the CPU (about 20 minutes on 2 cores), and "
        "write them with a training.json recording the corpus, the recipe and the losses. The "
        "same as `python -m perfgate.engines.embedded.train`.",
    )
    add_train_arguments(train)
    train.set_defaults(handler=handle_train)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def handle_train(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.engines.embedded.train import run  # torch loads for this command only

    return run(args)
