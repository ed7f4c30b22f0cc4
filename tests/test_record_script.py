"""benchmarks/record.sh, what every GPU script starts from: perfgate from the checkout, with
its pytest plugin found where perfgate is not installed (a lent GPU machine's image). The one
check serves every script: benchmarks/sglang_live.sh's steps get what use_checkout's get. And
use_wheels, perfgate's own dependencies from wheels where a GPU image lacks them (the gate
proof, the overlap and the phase-windows scripts)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from .hang import HANG_S

REPO = Path(__file__).resolve().parents[1]

# The environment a script's steps run in, given the script's interpreter and its checkout.
Setup = Callable[[str, Path], dict[str, str]]


def _use_checkout(python: str, repo: Path) -> dict[str, str]:
    """The environment `use_checkout` leaves, with python as the script's interpreter and repo
    as the checkout."""
    script = (
        f'source "{REPO}/benchmarks/record.sh"; repo="{repo}"; python="{python}"; '
        "unset PYTEST_PLUGINS PYTHONPATH; use_checkout; env"
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=HANG_S
    )
    return _parse(done.stdout)


def _sglang_live(python: str, checkout: Path) -> dict[str, str]:
    """The environment benchmarks/sglang_live.sh runs its steps in, from a copy of its scripts
    in checkout: its record stage started through a stand-in interpreter that writes down its
    environment, then runs python (whatever the step makes of it)."""
    (checkout / "benchmarks").mkdir(parents=True)
    for name in ("sglang_live.sh", "stages.sh", "record.sh"):
        shutil.copy2(REPO / "benchmarks" / name, checkout / "benchmarks" / name)
    seen = checkout.parent / "seen.env"
    stand_in = checkout.parent / "python"
    stand_in.write_text(f'#!/bin/sh\nenv > "{seen}"\nexec "{python}" "$@"\n')
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_PLUGINS", "PYTHONPATH")}
    subprocess.run(
        [str(checkout / "benchmarks" / "sglang_live.sh"), str(checkout.parent / "out"), "record"],
        env={**env, "PYTHON": str(stand_in)},
        capture_output=True,
        check=False,  # a bare interpreter fails the step itself; its environment is the point
        timeout=HANG_S,
    )
    return _parse(seen.read_text())


def _parse(env: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in env.splitlines() if "=" in line)


@pytest.fixture(params=[_use_checkout, _sglang_live], ids=["use_checkout", "sglang_live.sh"])
def setup(request: pytest.FixtureRequest) -> Setup:
    return request.param  # type: ignore[no-any-return]


def _bare_python(folder: Path) -> Path:
    venv.create(folder, with_pip=False)  # no perfgate, so no pytest11 entry point
    return folder / "bin" / "python"


def test_a_python_without_perfgate_installed_gets_the_plugin_by_name(
    setup: Setup, tmp_path: Path
) -> None:
    # A checkout as it travels to a GPU machine: no perfgate.egg-info (git ignores it), whose
    # entry point an editable install here would otherwise offer through PYTHONPATH.
    checkout = tmp_path / "checkout"
    env = setup(str(_bare_python(tmp_path / "bare")), checkout)
    assert env.get("PYTEST_PLUGINS") == "perfgate.plugin"
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(checkout)  # nothing else after it
    assert env["NCCL_NVLS_ENABLE"] == "0"


def test_a_perfgate_that_registers_no_entry_point_gets_the_plugin_by_name(
    setup: Setup, tmp_path: Path
) -> None:
    """What pytest loads the plugin by is the entry point, not an installed distribution of
    that name: a perfgate whose metadata registers none gets the plugin by name."""
    python = _bare_python(tmp_path / "bare")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dist = tmp_path / "bare" / "lib" / version / "site-packages" / "perfgate-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: perfgate\nVersion: 0.0\n")
    env = setup(str(python), tmp_path / "checkout")
    assert env.get("PYTEST_PLUGINS") == "perfgate.plugin"


def test_an_installed_perfgate_keeps_its_entry_point_alone(setup: Setup, tmp_path: Path) -> None:
    env = setup(sys.executable, tmp_path / "checkout")  # the dev install registers the plugin
    assert "PYTEST_PLUGINS" not in env  # naming it as well would load it twice


def _use_wheels(
    python: Path, repo: Path, state: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """`use_wheels STATE` as a script runs it, then the PYTHONPATH it leaves."""
    script = (
        f'source "{REPO}/benchmarks/record.sh"; repo="{repo}"; python="{python}"; '
        f'PYTHONPATH=/kept; use_wheels "{state}"; echo "PYTHONPATH=$PYTHONPATH"'
    )
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=HANG_S,
        env={k: v for k, v in os.environ.items() if k != "WHEELS"} | env,
    )


def test_without_the_dependencies_or_wheels_use_wheels_exits_69_saying_what_to_download(
    tmp_path: Path,
) -> None:
    bare = _bare_python(tmp_path / "venv")  # imports no sqlalchemy
    (tmp_path / "checkout" / ".whl").mkdir(parents=True)
    done = _use_wheels(bare, tmp_path / "checkout", tmp_path / "state")  # WHEELS unset
    assert done.returncode == 69
    assert f"{tmp_path / 'checkout' / '.whl'} holds no wheels" in done.stderr
    assert "download SQLAlchemy, greenlet, alembic and Mako for Python 3.12" in done.stderr
    assert not (tmp_path / "state").exists()


def test_use_wheels_installs_the_wheels_into_state_ahead_of_the_path(tmp_path: Path) -> None:
    bare = _bare_python(tmp_path / "venv")
    # An interpreter that imports none of the three but runs pip (this one's).
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$1" = -m ] && exec "{sys.executable}" "$@"\nexec "{bare}" "$@"\n'
    )
    python.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("sqlalchemy", "alembic", "mako"):  # stand-ins, installed offline
        _wheel(wheels, name)
    done = _use_wheels(python, tmp_path, tmp_path / "state", WHEELS=str(wheels))
    assert done.returncode == 0, done.stderr
    assert f"PYTHONPATH={tmp_path / 'state' / 'site'}:/kept" in done.stdout
    for name in ("sqlalchemy", "alembic", "mako"):
        assert (tmp_path / "state" / "site" / name / "__init__.py").is_file()
    # The next call (a device's, say) uses them where they are: nothing to install, so the
    # wheels may be gone, and the path names the folder once.
    for wheel in wheels.iterdir():
        wheel.unlink()
    again = _use_wheels(python, tmp_path, tmp_path / "state", WHEELS=str(wheels))
    assert again.returncode == 0, again.stderr
    assert f"PYTHONPATH={tmp_path / 'state' / 'site'}:/kept\n" in again.stdout


def test_an_interpreter_with_the_dependencies_installs_nothing(tmp_path: Path) -> None:
    done = _use_wheels(Path(sys.executable), tmp_path, tmp_path / "state")  # WHEELS unset
    assert done.returncode == 0, done.stderr
    assert "PYTHONPATH=/kept\n" in done.stdout
    assert not (tmp_path / "state").exists()


def _wheel(folder: Path, name: str) -> None:
    """A minimal wheel of one empty package `name`, version 1."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{name}/__init__.py": b"",
        f"{name}-1.dist-info/WHEEL": b"Wheel-Version: 1.0\n"
        b"Generator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{name}-1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1\n".encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}-1.dist-info/RECORD,,")
    with zipfile.ZipFile(folder / f"{name}-1-py3-none-any.whl", "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{name}-1.dist-info/RECORD", "\n".join(record) + "\n")


# Each gpu_*.sh script's own words after OUTDIR, and how many arguments it takes (OUTDIR
# counted; None: any number more).
SCRIPT_ARGS = {
    "gpu_real_weights.sh": ("[train] [bandwidth] [sweep] [gate | launch judge]", 1, None),
    "gpu_tp2.sh": ("[compare] [sweep] [profile] [endings]", 1, None),
    "gpu_rank_failure.sh": ("[ROUNDS]", 1, 2),
    "gpu_gate_proof.sh": (
        "STAGE... (train diagnose launch approve machine verdicts record)",
        2,
        None,
    ),
    "gpu_stop_guessing.sh": ("", 1, 1),
}


@pytest.mark.parametrize("name", sorted(SCRIPT_ARGS))
def test_every_gpu_script_reads_smoke_and_outdir_alike_and_refuses_a_wrong_count(
    name: str, tmp_path: Path
) -> None:
    """record_args: too few or too many arguments, with --smoke or without, exit 64 with
    the script's usage before anything is run or written."""
    words, least, most = SCRIPT_ARGS[name]
    usage = f"usage: benchmarks/{name} [--smoke] OUTDIR" + (f" {words}" if words else "")
    out = tmp_path / "out"
    wrong = [[str(out)] * (least - 1)]
    if most is not None:
        wrong.append([str(out)] * (most + 1))
    for args in wrong:
        for smoke in ([], ["--smoke"]):
            done = subprocess.run(
                ["bash", f"benchmarks/{name}", *smoke, *args],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=HANG_S,
                check=False,
            )
            assert (done.returncode, done.stderr) == (64, usage + "\n"), (args, smoke)
    assert not out.exists()


def _history_ids(call: str) -> list[str]:
    script = f'source "{REPO}/benchmarks/record.sh"; python="{sys.executable}"; {call}'
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=HANG_S
    )
    return done.stdout.splitlines()


def test_the_scripts_read_run_ids_from_a_history_oldest_first(tmp_path: Path) -> None:
    """run_ids and last_run_id, which the scripts approve and count launches by, on a real
    SQLite history: six runs of two scenarios."""
    db = tmp_path / "history.db"
    with sqlite3.connect(db) as connection:
        connection.execute("create table runs (id integer primary key, scenario text)")
        connection.executemany(
            "insert into runs (id, scenario) values (?, ?)",
            [(i, "a" if i % 2 else "b") for i in range(1, 7)],
        )
    connection.close()

    assert _history_ids(f'run_ids "{db}" a') == ["1", "3", "5"]
    assert _history_ids(f'run_ids "{db}" a 1') == ["3", "5"]  # after id 1
    assert _history_ids(f'run_ids "{db}" b 0 2') == ["4", "6"]  # the last 2
    assert _history_ids(f'run_ids "{db}" c') == []  # no line, not an empty one
    assert _history_ids(f'last_run_id "{db}"') == ["6"]
    assert _history_ids(f'last_run_id "{tmp_path / "none.db"}"') == ["0"]
