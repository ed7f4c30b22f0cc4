"""scripts/bootstrap: one line while it sets up, pip's output only when pip fails (then all of it).

The script runs on a copy of itself beside its two input files, with PYTHON an interpreter
whose venv's python is a stand-in for pip: it prints what pip prints, and fails where told.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

SETTING_UP = "setting up .venv, first run only: about a minute\n"
WITH_TOOLS = "setting up .venv with the development tools, first run only: a few minutes\n"
FAKE_PYTHON = """#!/bin/sh
# `python -m venv DIR` makes DIR/bin/python, a pip that talks as pip does; nothing else works.
[ "$1" = -m ] && [ "$2" = venv ] || { echo "fake python: $*" >&2; exit 2; }
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'EOF'
#!/bin/sh
echo "Looking in indexes: the configured ones ($*)"
echo "WARNING: a warning pip prints on every install" >&2
case "$*" in
  *"$PIP_FAILS_ON"*)
    echo "ERROR: No matching distribution found for torch==2.13.0" >&2
    exit 1 ;;
esac
echo "$*" >> "$(dirname "$0")/pip-calls"
EOF
chmod +x "$3/bin/python"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
    for name in ("pyproject.toml", "requirements-dev.txt"):
        shutil.copy2(REPO / name, tmp_path / name)
    python = tmp_path / "fake-python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def _bootstrap(
    checkout: Path, *args: str, fails_on: str = "nothing fails"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(checkout / "fake-python"), "PIP_FAILS_ON": fails_on}
    return subprocess.run(
        [str(checkout / "scripts" / "bootstrap"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_first_setup_says_one_line_and_a_second_nothing(checkout: Path) -> None:
    first = _bootstrap(checkout)
    assert (first.returncode, first.stdout, first.stderr) == (0, "", SETTING_UP)
    assert (checkout / ".venv" / ".perfgate-installed").is_file()
    second = _bootstrap(checkout)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
    (checkout / "requirements-dev.txt").write_text("torch==2.13.0\n")
    changed = _bootstrap(checkout)
    assert changed.returncode == 0 and changed.stdout == "", changed.stderr
    assert changed.stderr.startswith("updating .venv (pyproject.toml or requirements-dev.txt")


def _installed(checkout: Path) -> list[str]:
    """The extras each `pip install -e` installed, in order; the pip calls start afresh."""
    calls = checkout / ".venv" / "bin" / "pip-calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return [line.split("-e ", 1)[1] for line in lines if "-e " in line]


def test_the_gate_gets_no_tools_and_the_tests_add_them_once(checkout: Path) -> None:
    """scripts/gate's set-up installs what the gate runs; scripts/test's (--dev) adds the
    development tools to that .venv, once; a .venv with the tools keeps them."""
    gate = _bootstrap(checkout)
    assert (gate.returncode, gate.stderr) == (0, SETTING_UP)
    assert _installed(checkout) == [".[embedded,postgresql]"]
    dev = _bootstrap(checkout, "--dev")
    assert (dev.returncode, dev.stderr) == (
        0,
        "adding the development tools to .venv: a minute or two\n",
    )
    assert _installed(checkout) == [".[dev,embedded,postgresql]"]
    for args in ((), ("--dev",)):  # nothing more to do, either way
        again = _bootstrap(checkout, *args)
        assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert _installed(checkout) == []
    # Its inputs changed: the update keeps the tools, asked for or not.
    (checkout / "requirements-dev.txt").write_text("torch==2.13.0\n# changed\n")
    assert _bootstrap(checkout).stderr.startswith("updating .venv (pyproject.toml")
    assert _installed(checkout) == [".[dev,embedded,postgresql]"]


def test_a_first_setup_for_the_tests_installs_the_tools_at_once(checkout: Path) -> None:
    done = _bootstrap(checkout, "--dev")
    assert (done.returncode, done.stderr) == (0, WITH_TOOLS)
    assert _installed(checkout) == [".[dev,embedded,postgresql]"]
    # A stamp from before the tools were optional (a digest alone) stands for the tools.
    stamp = checkout / ".venv" / ".perfgate-installed"
    stamp.write_text(stamp.read_text().split()[0] + "\n")
    assert _bootstrap(checkout, "--dev").stderr == ""


def test_an_unknown_argument_is_bad_input(checkout: Path) -> None:
    done = _bootstrap(checkout, "--tools")
    assert done.returncode == 64 and not (checkout / ".venv").exists()
    assert (
        done.stderr
        == "scripts/bootstrap: unknown argument '--tools' (usage: scripts/bootstrap [--dev])\n"
    )


def test_a_failing_pip_prints_all_of_the_setups_output_and_its_exit_code(checkout: Path) -> None:
    done = _bootstrap(checkout, fails_on="-r requirements-dev.txt")
    assert done.returncode == 1 and done.stdout == "", done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == SETTING_UP.strip()
    assert lines[1] == (
        "scripts/bootstrap: `.venv/bin/python -m pip install -r requirements-dev.txt` failed "
        "(exit 1); the whole output of the setup:"
    )
    # Every step's output, the ones that passed too, in order, the failing step's error last.
    assert lines[2:] == [
        f"$ {checkout / 'fake-python'} -m venv .venv",
        "$ .venv/bin/python -m pip install --upgrade pip",
        "Looking in indexes: the configured ones (-m pip install --upgrade pip)",
        "WARNING: a warning pip prints on every install",
        "$ .venv/bin/python -m pip install -r requirements-dev.txt",
        "Looking in indexes: the configured ones (-m pip install -r requirements-dev.txt)",
        "WARNING: a warning pip prints on every install",
        "ERROR: No matching distribution found for torch==2.13.0",
    ]
    assert not (checkout / ".venv" / ".perfgate-installed").exists()
    # Run again: the venv is kept, the install tried again; quiet once it passes.
    again = _bootstrap(checkout)
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    assert (checkout / ".venv" / ".perfgate-installed").is_file()
