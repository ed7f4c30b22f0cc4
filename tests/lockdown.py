"""Real conditions for tests that must not be simulated: a read-only mount, an immutable file,
another CPU model. They need root (`unshare -m` and `chattr`); CI runs as root, so there they
run, and elsewhere they skip and say why.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from perfgate.hardware import cpu_model

# Another CPU model than this machine's: the first of these that it is not (a test that fakes
# a foreign CPU must not pass or fail by the model of the machine it runs on).
_CPU_MODELS = ("Intel(R) Xeon(R) Processor @ 2.80GHz", "Intel(R) Xeon(R) Platinum 8480+")
FAKE_CPU = next(model for model in _CPU_MODELS if model != cpu_model())
# Run "$@" after "--" once each folder before it is bind-mounted read-only over itself. The
# namespace is private (unshare's default propagation): the mounts end with the command, and no
# other process sees them.
_READ_ONLY_THEN_RUN = (
    'while [ "$1" != -- ]; do mount --bind -o ro "$1" "$1" || exit 97; shift; done; '
    'shift; exec "$@"'
)


def require_unshare() -> None:
    """Skip unless this process may bind-mount in a private mount namespace (root, `unshare`)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs `unshare` (util-linux) for a private mount namespace")
    done = subprocess.run(
        ["unshare", "-m", "mount", "--bind", "-o", "ro", "/", "/"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount in a private mount namespace (not root?): {done.stderr}")


def with_mounts(
    argv: Sequence[str], *, read_only: Sequence[Path] = (), cpuinfo: Path | None = None
) -> list[str]:
    """``argv`` run in a private mount namespace where each folder of ``read_only`` is
    mounted read-only over itself and the file ``cpuinfo`` stands for /proc/cpuinfo."""
    script = _READ_ONLY_THEN_RUN
    if cpuinfo is not None:
        script = 'mount --bind "$0" /proc/cpuinfo || exit 97; ' + script
    name = str(cpuinfo) if cpuinfo is not None else "sh"
    return ["unshare", "-m", "sh", "-c", script, name, *map(str, read_only), "--", *argv]


def fake_cpuinfo(folder: Path, model: str = FAKE_CPU, count: int = 2) -> Path:
    """A /proc/cpuinfo that names another CPU model."""
    path = folder / "cpuinfo"
    path.write_text("".join(f"processor\t: {i}\nmodel name\t: {model}\n\n" for i in range(count)))
    return path


@contextmanager
def immutable(path: Path) -> Iterator[Path]:
    """``path`` made immutable (`chattr +i`) for the block: not even root may write it."""
    if shutil.which("chattr") is None:
        pytest.skip("needs `chattr` (e2fsprogs) for an immutable file")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make {path} immutable here (not root, or tmpfs?): {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
