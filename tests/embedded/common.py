"""Constants and types shared by the embedded engine's tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

import perfgate
from perfgate.engines.embedded.worker import EagleWorker

CPU = torch.device("cpu")
TARGET = "perfgate/llama-tiny"
DRAFT = "perfgate/eagle3-llama-tiny"

PROMPTS: tuple[list[int], ...] = (
    list(b"Hello, world!"),
    list(b"The quick brown fox jumps over the lazy dog"),
    [7],
)

# Drafts: the shipped EAGLE-3 head (seeded, so it is almost never right), the target's own
# weights (always right) and the target with noise (right part of the time).
DRAFT_KINDS = ("eagle3", "self", "perturbed")

# (draft kind, num_steps) -> a chain-drafting worker over the target
SpecWorkerFactory = Callable[[str, int], EagleWorker]

SERVER_MODULE = "perfgate.engines.embedded.server"


def server_env() -> dict[str, str]:
    """Return an environment whose Python imports the perfgate these tests import."""
    root = str(Path(perfgate.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, path] if path else [root])}
