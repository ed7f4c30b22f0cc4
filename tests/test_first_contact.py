"""README command 1 on a fresh clone, on a machine the committed baselines were not measured on.

The machine is faked where it counts: the clone's runs read another CPU model from a
/proc/cpuinfo bind-mounted in a private mount namespace (root and `unshare` needed; CI has both),
so the committed CPU baseline's runner profile and fingerprint are not this machine's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

FOREIGN_CPU = "Intel(R) Xeon(R) Processor @ 2.80GHz"
FOREIGN_PROFILE = f"cpu-intel-xeon-{os.cpu_count()}c"


def _can_fake_cpuinfo() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "true"], capture_output=True, text=True, timeout=30, check=False
    )
    return probe.returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _can_fake_cpuinfo(),
        reason="faking another CPU needs root and `unshare -m` (a private mount namespace)",
    ),
]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of this repository's committed tree (no venv, no history, no cache)."""
    folder = tmp_path_factory.mktemp("first-contact") / "perfgate"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(folder)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder


@pytest.fixture(scope="module")
def cpuinfo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("machine") / "cpuinfo"
    cores = [f"processor\t: {i}\nmodel name\t: {FOREIGN_CPU}\n" for i in range(os.cpu_count() or 1)]
    path.write_text("\n".join(cores))
    return path


def _command_1(clone: Path, cpuinfo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`scripts/gate` as the README gives it, on the faked machine."""
    script = f"mount --bind {cpuinfo} /proc/cpuinfo && exec scripts/gate"
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "VIRTUAL_ENV")}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        cwd=clone,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_command_1_passes_twice_on_a_foreign_machine_and_says_what_it_judged_against(
    clone: Path, cpuinfo: Path
) -> None:
    assert (clone / "baselines" / "cpu-amd-epyc-2c" / "embedded-default.json").is_file()
    first = _command_1(clone, cpuinfo)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    assert f"embedded-default on {FOREIGN_PROFILE}: run #1 PASS" in out
    assert (
        "first run of embedded-default on this machine (no reviewed baseline for runner "
        f"profile {FOREIGN_PROFILE}): recorded as the local reference; the next run will be "
        "compared with it"
    ) in out

    second = _command_1(clone, cpuinfo)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert (
        "judged against 1 earlier run on this machine (#1); no reviewed baseline for runner "
        f"profile {FOREIGN_PROFILE}"
    ) in out
    for metric in ("output_tok_s", "verify_ms", "accept_length", "speedup"):
        assert f"  {metric} " in out, out
    assert (clone / "reports" / "index.html").is_file()


def test_command_1_in_ci_demands_a_reviewed_baseline_with_the_fix(
    clone: Path, cpuinfo: Path
) -> None:
    result = _command_1(clone, cpuinfo, CI="true")
    assert result.returncode == 64, result.stdout + result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("perfgate: error: ")]
    path = f"baselines/{FOREIGN_PROFILE}/embedded-default.json"
    assert path in line
    assert "no reviewed baseline for scenario 'embedded-default'" in line
    assert "`perfgate run --no-gate --scenario embedded-default`" in line
    assert "`perfgate baseline update --run ID [--run ID ...] --approved-by NAME" in line
    assert not (clone / path).exists()
