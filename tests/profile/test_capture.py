"""How `perfgate profile` launches a server: the probe on, its phase marks where needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.config import load_config
from perfgate.engines import sglang
from perfgate.engines.validate import Preflight
from perfgate.errors import InfrastructureError
from perfgate.probe import DIR_VARIABLE, RANGES_VARIABLE
from perfgate.profile import capture

from ..conftest import write_config


@pytest.mark.parametrize(("engine", "ranges"), [("embedded", None), ("sglang", "1")])
def test_only_sglang_servers_mark_phases_all_along(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, ranges: str | None
) -> None:
    # The embedded engine marks them for its profile only: the unprofiled cycles it compares
    # with must not pay for the marks.
    launched: dict[str, Any] = {}

    def no_server(command: Any, *args: Any, **kwargs: Any) -> Any:
        launched["env"] = command.env
        raise InfrastructureError("not launched in this test")

    monkeypatch.setattr(capture, "running_server", no_server)
    scenario = replace(load_config(write_config(tmp_path)).scenarios["tiny"], engine=engine)
    release = sglang.release(sglang.PINNED) if engine == "sglang" else None
    with pytest.raises(InfrastructureError, match="not launched"):
        capture.capture_profile(scenario, tmp_path / "work", checked=Preflight(release, None))
    assert launched["env"][DIR_VARIABLE] == str(tmp_path / "work" / "probe")
    assert launched["env"].get(RANGES_VARIABLE) == ranges
