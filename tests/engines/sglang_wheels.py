"""Install SGLang wheels (no dependencies) into a cache folder, to read their source.

    python tests/engines/sglang_wheels.py [--parser-deps] [--client] [RELEASE ...]

With no release, the ones perfgate's tests check (perfgate.sglang.facts.CHECKED_RELEASES).
`--parser-deps` also installs what importing SGLang's `server_args` needs beyond torch and
numpy (for the test that parses perfgate's command lines with SGLang's own parser). CI runs
this before the tests (.ci/run); the tests call the same functions when the cache is cold.
`--client` makes a virtual environment in which SGLang's own clients run
(`python -m sglang.benchmark.serving`): the pinned release without its server's dependencies,
and what its client imports, from PyPI. The cache is `$PERFGATE_SGLANG_CACHE`, or
`.cache/sglang` in the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# What `import sglang.srt.server_args` (0.5.23) needs beyond torch and numpy, found by importing
# it in a clean environment: orjson, psutil, pybase64, requests, triton (imported by
# srt/utils/common.py), PIL, starlette, msgspec, pydantic, zmq, tqdm, IPython, aiohttp. Not
# triton here: the development install pins it (requirements-dev.txt), and the tests put this
# folder after the environment's own packages, so a second copy (1 GB) would never be read.
PARSER_DEPS = (
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "pillow",
    "starlette",
    "msgspec",
    "pydantic",
    "pyzmq",
    "tqdm",
    "ipython",
    "aiohttp",
)
# What `python -m sglang.benchmark.serving` (0.5.23) imports, found by running it in a fresh
# environment: SGLang's own pins (torch, torchvision, transformers, tokenizers), the modules
# its import of sglang.srt.disaggregation.utils reaches, and what its datasets import
# (datasets, PIL). PyPI's torch is the CUDA build (about 6 GB with its libraries); torchvision
# from PyPI needs it, and SGLang's config modules import torchvision.
CLIENT_DEPS = (
    "torch==2.14.1",
    "torchvision==0.29.1",
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "datasets",
    "aiohttp",
    "orjson",
    "msgspec",
    "requests",
    "tqdm",
    "pybase64",
    "pillow",
    "psutil",
    "pydantic",
    "pyzmq",
    "ipython",
    "starlette",
    "apache-tvm-ffi",
    "sentencepiece",
    "compressed-tensors",
    "gguf",
)
CLIENT_READY = ".perfgate-client-ready"
# SGLang's wheels are built for CPython 3.11 on manylinux_2_34 x86_64 (older ones are pure
# Python): ask for those explicitly, so that the source can be read on any machine.
WHEEL_TAGS = (
    "--platform=manylinux_2_34_x86_64",
    "--python-version=3.11",
    "--implementation=cp",
    "--only-binary=:all:",
)


def cache_root() -> Path:
    return Path(os.environ.get("PERFGATE_SGLANG_CACHE") or REPO / ".cache" / "sglang")


@contextlib.contextmanager
def _installing() -> Iterator[None]:
    """Hold the cache's lock: test workers that find the same release missing install it once."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _pip(args: list[str], target: Path) -> None:
    """`pip install --target` into a fresh folder, moved into place only when complete."""
    with _installing():
        if not target.exists():  # another worker may have installed it while this one waited
            _pip_unlocked(args, target)


def _pip_unlocked(args: list[str], target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command += ["--cache-dir", str(cache_root() / "pip"), "--target", str(partial), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(command)} failed:\n{tail}")
    partial.rename(target)


def install_release(release: str) -> Path:
    """The folder holding `sglang` of this release (installed on first use).

    Without byte-code: a release's source is read, and only the pinned one's argument parser
    imported (a few dozen of its 3700 modules, 0.4 s more without their .pyc); compiling
    them all cost 10 of the 12.5 CPU seconds of each release's install (0.5.20, 2 cores).
    """
    target = cache_root() / release
    if not (target / "sglang").is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        _pip(["--no-deps", "--no-compile", *WHEEL_TAGS, f"sglang=={release}"], target)
    return target


def install_parser_deps() -> Path:
    """The folder holding what importing SGLang's server_args needs (installed on first use)."""
    target = cache_root() / "parser-deps"
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        _pip(list(PARSER_DEPS), target)
    return target


def client_python(release: str) -> Path:
    """The interpreter of the client environment of `release` (it may not exist yet)."""
    return cache_root() / f"client-{release}" / "bin" / "python"


def install_client(release: str) -> Path:
    """The interpreter of a virtual environment where SGLang's clients run (made on first use).

    Its large wheels go through pip's own cache, shared by every checkout on the machine.
    """
    python = client_python(release)
    folder = python.parent.parent
    if (folder / CLIENT_READY).is_file():
        return python
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    for args in ([*CLIENT_DEPS], ["--no-deps", f"sglang=={release}"]):
        command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = subprocess.run([*command, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"{' '.join(command + args)} failed:\n{tail}")
    (folder / CLIENT_READY).write_text(f"sglang=={release}\n")
    return python


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from perfgate.sglang.facts import CHECKED_RELEASES, PINNED

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", default=[*CHECKED_RELEASES, PINNED])
    parser.add_argument("--parser-deps", action="store_true")
    parser.add_argument("--client", action="store_true", help=f"SGLang {PINNED}'s clients")
    args = parser.parse_args(argv)
    for release in dict.fromkeys(args.releases):
        print(f"sglang {release}: {install_release(release)}")
    if args.parser_deps:
        print(f"parser dependencies: {install_parser_deps()}")
    if args.client:
        print(f"SGLang {PINNED}'s clients: {install_client(PINNED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
