"""Real linters on every workflow: actionlint (with shellcheck on each `run:`) and zizmor.

0 errors from actionlint, and no zizmor finding at all in its default persona (so none of
high severity). Each linter is also shown to catch a planted mistake, so a linter that stopped
reading the files (or the config) cannot pass for a clean result.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import REPO
from ..hang import HANG_S
from .conftest import WORKFLOWS, linter

BAD_WORKFLOW = """\
name: bad
on: pull_request
permissions: {}
jobs:
  gate:
    runs-on: [self-hosted, linux, x64, gpu-16x]
    timeout-minutes: 5
    permissions:
      contents: read
    steps:
      - run: echo "${{ github.event.pull_request.title }}" && echo $UNQUOTED
"""


def _actionlint(cwd: Path, *files: str) -> subprocess.CompletedProcess[str]:
    command = [linter("actionlint"), "-shellcheck", linter("shellcheck"), "-no-color", *files]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=HANG_S, check=False
    )


def _zizmor(target: Path) -> list[dict]:  # type: ignore[type-arg]
    done = subprocess.run(
        [linter("zizmor"), "--offline", "--format=json", "--no-progress", str(target)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode in (0, 11, 12, 13, 14), done.stderr  # 1x: findings of some severity
    return json.loads(done.stdout)


def test_the_five_workflows_exist() -> None:
    assert [path.name for path in WORKFLOWS] == [
        "baseline-update.yml",
        "ci.yml",
        "nightly.yml",
        "perf-gate.yml",
        "sweep.yml",
    ]


def test_actionlint_and_shellcheck_find_nothing() -> None:
    result = _actionlint(REPO, *(str(path.relative_to(REPO)) for path in WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_actionlint_reads_the_runner_labels_and_runs_shellcheck(tmp_path: Path) -> None:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / ".github" / "actionlint.yaml", tmp_path / ".github")
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text(BAD_WORKFLOW)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = _actionlint(tmp_path, ".github/workflows/bad.yml")
    assert result.returncode == 1
    assert 'label "gpu-16x" is unknown' in result.stdout  # gpu-8x would pass: it is declared
    assert "github.event.pull_request.title" in result.stdout and "[expression]" in result.stdout
    assert "SC2086" in result.stdout  # shellcheck, on the run: script


def test_zizmor_finds_nothing_offline() -> None:
    findings = _zizmor(REPO / ".github" / "workflows")
    assert findings == [], json.dumps(findings, indent=1)[:4000]


def test_zizmor_catches_template_injection(tmp_path: Path) -> None:
    (tmp_path / "bad.yml").write_text(BAD_WORKFLOW)
    findings = _zizmor(tmp_path / "bad.yml")
    injection = [f for f in findings if f["ident"] == "template-injection"]
    assert injection and injection[0]["determinations"]["severity"] == "High", findings


@pytest.mark.parametrize("script", sorted((REPO / "benchmarks").glob("*.sh")), ids=lambda p: p.name)
def test_the_benchmark_scripts_pass_shellcheck(script: Path) -> None:
    done = subprocess.run(
        [linter("shellcheck"), "-x", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout


def test_the_hook_scripts_pass_shellcheck() -> None:
    hooks = sorted(str(p) for p in (REPO / "runner" / "hooks").glob("*.sh"))
    assert len(hooks) == 2
    done = subprocess.run(
        [linter("shellcheck"), *hooks], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
