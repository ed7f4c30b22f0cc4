"""Environment variable names a shell can set: the only ones a scenario or sweep may name.

`perfgate servers --dry-run` prints each server as `NAME=value ... argv`, a line meant to be
pasted into a shell; a name such as `NCCL_A$(touch X)` would run as a command there. So a name
must be what POSIX calls a name: letters, digits and underscores, not starting with a digit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from perfgate.errors import ConfigError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(name: str) -> bool:
    """True when a shell accepts `name=value` as an assignment (ASCII letters, digits, _)."""
    return ENV_NAME.fullmatch(name) is not None


def refuse_bad_env_names(
    names: Iterable[str], *, field: str, file: str | Path | None = None
) -> None:
    """Raise a ConfigError naming the first name a shell could not set."""
    for name in names:
        if not is_env_name(name):
            raise ConfigError(
                f"{name!r} is not an environment variable name",
                file=file,
                field=field,
                fix="use ASCII letters, digits and _, not starting with a digit (e.g. NCCL_PROTO)",
            )
