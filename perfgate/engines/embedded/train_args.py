"""The flags of the embedded engine's training (`perfgate embedded train`, `python -m
perfgate.engines.embedded.train`), declared without importing torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfgate.engines.embedded.recipes import CACHE_VARIABLE, LARGE, RECIPES, TINY


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the training command's flags to parser (without importing torch)."""
    parser.add_argument(
        "--size",
        choices=tuple(RECIPES),
        default=TINY.size,
        help=f"tiny: perfgate/{TINY.target} and its head, on the CPU, shipped in the package; "
        f"large: perfgate/{LARGE.target} and its head, on one GPU (about "
        f"{LARGE.estimated_minutes} minutes on an H200), cached on this machine "
        "(default tiny)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="train on the CPU in fp32, or on the first GPU in bf16 autocast with fp32 master "
        "weights (default cpu)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"directory to write the two model folders into: required with --size tiny (pass "
        "perfgate/engines/embedded/models to replace the shipped weights); with --size large "
        f"the default is this machine's model cache (${CACHE_VARIABLE}, else "
        "${XDG_CACHE_HOME:-~/.cache}/perfgate/models), under a key of the recipe, written "
        "whole or not at all",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="train again when the cache holds the models already (without it the command "
        "says where they are and exits 0)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every phase's steps by this (e.g. 0.01 for a smoke run; needs --out "
        "with --size large); default 1",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument(
        "--skip-quality",
        action="store_true",
        help="do not measure the trained models on the default prompts (distinct n-grams, "
        "accept lengths) for training.json",
    )
