"""The repository's perfgate.toml with its default scenario's requests shortened.

For the tests that run a command end to end on the shipped configuration: each new token of
the default prompts costs every server of the run, while what they check (the command's
output, records and report) needs only a few decode cycles.
"""

from __future__ import annotations

import re
from pathlib import Path

from perfgate.config import load_config

from .conftest import REPO

DEFAULT = "embedded-default"


def shortened_default(folder: Path, max_new_tokens: int) -> Path:
    """Write the repository's perfgate.toml into `folder`, its default scenario's
    max_new_tokens set to `max_new_tokens`; return its path."""
    text = (REPO / "perfgate.toml").read_text(encoding="utf-8")
    head, table, rest = text.partition(f"[scenarios.{DEFAULT}]\n")
    rest = re.sub(
        r"^max_new_tokens = \d+$", f"max_new_tokens = {max_new_tokens}", rest, count=1, flags=re.M
    )
    path = folder / "perfgate.toml"
    path.write_text(head + table + rest, encoding="utf-8")
    assert load_config(path).scenarios[DEFAULT].max_new_tokens == max_new_tokens
    return path
