"""The flags of the embedded engine's training (`perfgate embedded train`, `python -m
perfgate.engines.embedded.train`), declared without importing torch."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the training command's flags to parser (without importing torch)."""
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory to write llama-tiny/ and eagle3-llama-tiny/ into; pass "
        "perfgate/engines/embedded/models to replace the shipped weights",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every phase's steps by this (e.g. 0.01 for a smoke run); default 1",
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
