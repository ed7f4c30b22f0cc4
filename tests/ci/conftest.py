"""Helpers for the workflow tests: the workflows, parsed, and the linters, found or required."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def load_workflow(name: str) -> dict[str, Any]:
    """A workflow as a dict; PyYAML reads the `on:` key as True (YAML 1.1), put back here."""
    document = yaml.safe_load((REPO / ".github" / "workflows" / name).read_text())
    if True in document:
        document["on"] = document.pop(True)
    return document


def linter(name: str) -> str:
    """The path of a linter from the dev extra; missing, a skip here and a failure in CI."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        message = f"{name} is not installed: pip install -e '.[dev]'"
        if os.environ.get("PERFGATE_REQUIRE_LINTERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found
