"""`perfgate profile` as a user runs it: a real server on the default models, a real trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.profile.trace import CPU_OPS, load_trace

from ..in_process import perfgate_main
from ..shortened_default import shortened_default


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The repository's perfgate.toml, the default scenario's requests cut from 64 new tokens
    to 16: 2 profiled cycles and the same 2 of each unprofiled repeat need no more."""
    shortened_default(tmp_path, max_new_tokens=16)
    return tmp_path


@pytest.mark.slow
def test_a_profile_of_the_default_scenario(project: Path) -> None:
    done = perfgate_main(
        *("profile", "--cycles", "2", "--repeats", "2", "--out", "prof"), cwd=project
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The server's start, the repeats and the profiled one go to stderr: stdout is the report.
    for line in (
        "embedded-default: starting spec server\n",
        "embedded-default spec: repeat 2 of 2, ",
        "embedded-default spec: profiled repeat and its trace: done in ",
    ):
        assert line in done.stderr and line not in done.stdout
    assert sorted(p.name for p in (project / "prof").iterdir()) == [
        "profile.json",
        "profile.md",
        "trace.json.gz",
    ]
    report = json.loads((project / "prof" / "profile.json").read_text())
    assert report["scenario"] == "embedded-default" and report["source"] == CPU_OPS
    assert report["cycles"] == 2 and report["window"]["cycles"] == 2
    assert set(report["phases"]) >= {"draft", "verify", "accept", "draft_extend"}
    verify = report["phases"]["verify"]
    assert verify["count"] > 0 and verify["ms_per_cycle"]["matmul"] > 0
    assert verify["ms_per_cycle"]["attention"] > 0 and verify["ms_per_cycle"]["communication"] == 0
    overhead = report["overhead"]
    assert overhead["cycles_inside"] == 2 and overhead["cycles_outside"] == 4
    assert overhead["change"] is not None and 0 < report["coverage"] < 1.5
    events = load_trace(project / "prof" / "trace.json.gz")
    ranges = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert ranges.count("cycle") == 2 and ranges.count("verify") == 2
    assert "| verify |" in done.stdout and "**verify**:" in done.stdout
    assert "Profiler overhead: profiled cycles took" in done.stdout
    assert (project / "prof" / "profile.md").read_text() in done.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cycles", "0"], "--cycles: must be from 1 to 1000"),
        (["--cycles", "100000000000"], "--cycles: must be from 1 to 1000"),
        (["--activities", "MEM"], "--activities: 'MEM' names no activity or an unknown one"),
        (["--activities", "GPU"], "--activities: GPU alone records kernels but not the phase"),
        (["--phase", "cycle"], "--phase: unknown phase 'cycle'"),
        (["--repeats", "0"], "--repeats: must be >= 1"),
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--out", "perfgate.toml"], "perfgate.toml: is a file, not a folder --out can write into"),
        (["--out", "perfgate.toml/p"], "perfgate.toml: is a file, so --out perfgate.toml/p cannot"),
    ],
)
def test_bad_flags_are_refused_before_the_server_starts(
    project: Path, flags: list[str], message: str
) -> None:
    done = perfgate_main("profile", *flags, cwd=project)
    assert done.returncode == 64, done.stdout + done.stderr
    assert message in done.stderr
    assert not (project / ".perfgate").exists()
