"""The plain twin is reused from the history only when nothing that shapes it changed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from perfgate.config import Scenario
from perfgate.hardware import GpuInfo
from perfgate.plain_reuse import find_reusable_plain, plain_reuse_key, refresh_reason
from perfgate.store import open_history, record_run

from .factories import measurement, record

SCENARIO = Scenario(
    name="tp8",
    engine="sglang",
    model="org/target",
    draft="org/draft",
    tp=8,
    env={"NCCL_PROTO": "LL"},
    plain_max_age_h=24.0,
)
H200 = GpuInfo("NVIDIA H200", "570.1", "12.8", 8)


def _key(
    scenario: Scenario = SCENARIO, version: str = "0.5.23", gpus: GpuInfo | None = H200, **env: str
) -> str:
    return plain_reuse_key(scenario, version, "2.14.1", gpus, environ=env)


def test_the_key_follows_the_plain_side_only() -> None:
    key = _key()
    assert (
        _key(
            replace(
                SCENARIO,
                draft="org/other",
                steps=5,
                topk=2,
                draft_tokens=8,
                spec_extra_args=("--x",),
            )
        )
        == key
    )
    assert _key(replace(SCENARIO, name="renamed")) == key
    for changed in (
        replace(SCENARIO, model="org/bigger"),
        replace(SCENARIO, prompts=("another prompt",)),
        replace(SCENARIO, tp=4),
        replace(SCENARIO, repeats=3),
        replace(SCENARIO, env={"NCCL_PROTO": "Simple"}),
        replace(SCENARIO, plain_extra_args=("--cuda-graph-max-bs", "8")),
    ):
        assert _key(changed) != key
    assert _key(version="0.5.22") != key
    assert _key(gpus=replace(H200, driver="575.0")) != key
    assert _key(NCCL_ALGO="Ring") != key  # the runner's environment counts too


def test_when_the_twin_is_measured_anyway() -> None:
    assert refresh_reason(SCENARIO, False, "feature/x") is None
    assert refresh_reason(SCENARIO, True, "feature/x") == "--refresh-plain"
    assert refresh_reason(SCENARIO, False, "main") == "runs on main refresh it"
    assert refresh_reason(replace(SCENARIO, plain_max_age_h=None), False, "x") is not None


def _history(tmp_path: Path, *runs: tuple[datetime, str | None, int | None]):  # type: ignore[no-untyped-def]
    sessions = open_history(f"sqlite:///{tmp_path / 'history.db'}")
    with sessions.begin() as session:
        for started, key, reused_from in runs:
            m = measurement(started=started, plain_tok_s=100.0 + started.hour)
            m = replace(m, plain=replace(m.plain, reuse_key=key, reused_from=reused_from))
            record_run(session, record(m))
    return sessions


def test_the_newest_young_enough_original_is_reused(tmp_path: Path) -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    sessions = _history(
        tmp_path,
        (now - timedelta(hours=30), "k", None),  # too old
        (now - timedelta(hours=5), "k", None),  # run 2: the one
        (now - timedelta(hours=3), "other", None),
        (now - timedelta(hours=1), "k", 2),  # itself a copy: never reused again
    )
    found = find_reusable_plain(sessions, SCENARIO, "k", now=now)
    assert found is not None and found.reused_from == 2 and found.reuse_key == "k"
    assert found.samples["output_tok_s"][0] == pytest.approx(107.0)
    assert found.outputs == ((1, 2, 3), (4, 5, 6))  # the twin's outputs, for the equivalence check
    assert (
        find_reusable_plain(sessions, replace(SCENARIO, plain_max_age_h=4.0), "k", now=now) is None
    )
    assert find_reusable_plain(sessions, SCENARIO, "unknown", now=now) is None


def _reusing_scenario() -> str:
    """SHORT_SCENARIO (one timed repeat, no warm-up) with plain_max_age_h and one prompt of 8
    tokens: the test reads where the plain figures came from, never the figures; each run is
    still a server pair (the spec server, then the plain twin unless it is reused)."""
    from .short_scenario import SHORT_SCENARIO

    text = SHORT_SCENARIO.replace(
        "startup_timeout_s = 60", "startup_timeout_s = 60\nplain_max_age_h = 24"
    )
    text = text.replace(', "Create a new instance of"]', "]").replace(
        "max_new_tokens = 24", "max_new_tokens = 8"
    )
    assert "plain_max_age_h = 24" in text and "max_new_tokens = 8" in text
    assert "Create a new instance of" not in text
    return text


@pytest.mark.slow
def test_a_pull_request_run_reuses_the_twin_and_main_refreshes_it(tmp_path: Path) -> None:
    from .conftest import run_perfgate, write_config

    write_config(tmp_path, _reusing_scenario())
    pr = {"GITHUB_HEAD_REF": "feature/faster-draft", "GITHUB_REF_NAME": ""}
    first = run_perfgate("run", "--no-gate", cwd=tmp_path, env=pr)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "plain twin: measured (no run with the same plain fingerprint" in first.stdout

    second = run_perfgate("run", "--no-gate", cwd=tmp_path, env=pr)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "plain twin: figures reused from run #1" in second.stdout
    assert not list((tmp_path / ".perfgate" / "runs").glob("*/tiny/server-plain.log"))[
        1:
    ]  # one load

    refreshed = run_perfgate("run", "--no-gate", "--refresh-plain", cwd=tmp_path, env=pr)
    assert "plain twin: measured (--refresh-plain)" in refreshed.stdout, refreshed.stdout
    on_main = run_perfgate(
        "run", "--no-gate", cwd=tmp_path, env={"GITHUB_HEAD_REF": "", "GITHUB_REF_NAME": "main"}
    )
    assert "plain twin: measured (runs on main refresh it)" in on_main.stdout, on_main.stdout
    report = (tmp_path / "reports" / "index.html").read_text()
    assert "(plain from #1)" in report
