"""The machine state the job-started hook saves, as the run's fingerprint reads it back.

Kept apart from the hooks so that the fingerprint imports nothing heavier than json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

STATE_VARIABLE = "PERFGATE_MACHINE_STATE"  # exported by job-started through GITHUB_ENV


def load_state_fingerprint(environ: Mapping[str, str]) -> dict[str, str]:
    """The fingerprint fields job-started saved for this job; {} when there are none."""
    path = environ.get(STATE_VARIABLE)
    if not path:
        return {}
    try:
        document = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    fields = document.get("fingerprint") if isinstance(document, dict) else None
    return {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {}
