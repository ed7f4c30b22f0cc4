"""Constants and types shared by the embedded engine's tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch

import perfgate
from perfgate.engines.embedded.batch import Request
from perfgate.engines.embedded.worker import EagleWorker
from perfgate.engines.launch import free_port

from ..hang import HANG_S

CPU = torch.device("cpu")
TARGET = "perfgate/llama-tiny"
DRAFT = "perfgate/eagle3-llama-tiny"

PROMPTS: tuple[list[int], ...] = (
    list(b"Hello, world!"),
    list(b"The quick brown fox jumps over the lazy dog"),
    [7],
)

# Drafts: the shipped EAGLE-3 head, the target's own weights (always right) and the target
# with noise (right part of the time).
DRAFT_KINDS = ("eagle3", "self", "perturbed")

# (draft kind, num_steps, topk, num_draft_tokens, graph mode) -> a worker over the target
SpecWorkerFactory = Callable[..., EagleWorker]

SERVER_MODULE = "perfgate.engines.embedded.server"


def wait_healthy(
    client: httpx.Client, process: subprocess.Popen[bytes], log: Path, timeout_s: float
) -> None:
    """Wait for a server started by a test to answer /health; fail with its log if it does
    not, or if it exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"server exited early:\n{log.read_text()}"
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"server not healthy after {timeout_s} s:\n{log.read_text()}")


def requests(
    prompts: tuple[list[int], ...] | list[list[int]], max_new_tokens: int, top: int | None = None
) -> list[Request]:
    """Return one request per prompt, all with the same budget."""
    return [Request(prompt, max_new_tokens, top) for prompt in prompts]


def server_env() -> dict[str, str]:
    """Return an environment whose Python imports the perfgate these tests import."""
    root = str(Path(perfgate.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, path] if path else [root])}


@contextmanager
def serving(
    flags: Sequence[str], log: Path, start_timeout_s: float = HANG_S
) -> Iterator[httpx.Client]:
    """An embedded server on 127.0.0.1 with flags and one thread, its stderr in log; stopped
    with SIGTERM after."""
    port = free_port()
    argv = [sys.executable, "-m", SERVER_MODULE, *flags, "--port", str(port)]
    with log.open("wb") as stderr:
        process = subprocess.Popen([*argv, "--num-threads", "1"], stderr=stderr, env=server_env())
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=HANG_S) as client:
            wait_healthy(client, process, log, start_timeout_s)
            yield client
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


# Inductor writes Triton code for the CPU, as for a GPU, with Triton's backend hash faked.
TRITON_ON_CPU = """
import torch
import torch.utils._triton
from torch._inductor import config
from torch._inductor.codegen import triton as codegen

config.cpu_backend = "triton"
torch.utils._triton.triton_hash_with_backend = codegen.triton_hash_with_backend = lambda: "cpu"
"""


# The child of triton_kernels_written: each job's script in turn, each from a fresh start of
# Dynamo (its compiled frames dropped), with its own Inductor cache directory and sys.argv.
# Without two costs of Triton's interpreter (interpreter_waste.py) that change neither the code
# Inductor writes nor what its kernels compute: an argmax's reduction, which calls a jit helper
# for each pair of entries, spent two thirds of its run patching triton.language again.
_EACH_JOB = """
import json
import os
import sys

import torch._dynamo

from tests.embedded import interpreter_waste

interpreter_waste.skip()

for cache, script, argv in json.loads(sys.argv[1]):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    sys.argv[1:] = argv
    torch._dynamo.reset()
    exec(compile(script, "<script>", "exec"), {"__name__": "__main__"})
    print(f"{cache}: script ended", flush=True)
"""


@dataclass(frozen=True)
class Compiling:
    """A script for ``triton_kernels_written``: it runs with args as its sys.argv[1:] and
    cache as Inductor's cache directory, where the code it compiles is read."""

    script: str
    cache: Path
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Written:
    """What a script compiled: its cache directory, the names of the Triton kernels there
    (sorted), what it printed (None where it never ended) and, for a failure's message, all
    that the child printed."""

    cache: Path
    kernels: list[str]
    printed: str | None
    output: str

    def checked(self, expect: str | None = None) -> list[str]:
        """The kernels, once the script has ended having written some; with expect, it must
        have printed it (its kernels ran and checked out)."""
        assert self.kernels and self.printed is not None, self.output
        if expect is not None:
            assert expect in self.printed, self.output
        return self.kernels


def triton_kernels_written(*jobs: Compiling) -> list[Written]:
    """What Inductor writes while each job's script compiles, on this CPU, job by job.

    The scripts run in turn in one fresh Python (one start of Python, torch, Inductor and
    Triton for them all), after TRITON_ON_CPU; each starts with Dynamo reset and its own cache
    directory, so that what one compiled is neither reused nor read for another. Triton's
    interpreter runs the kernels: some run (pointwise ones), some fail (a reduction's), so a
    script that only wants the code lets them fail. A script that fails ends the child: it and
    those after it never end (``Written.checked`` fails, with the child's output).
    """
    env = {**server_env(), "TRITON_INTERPRET": "1"}
    # Inductor compiles the Triton code in this process, not in a pool of workers it would
    # start first (each a Python that imports torch and Triton): the same code, for less.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    plan = json.dumps([[str(job.cache), job.script, list(job.args)] for job in jobs])
    command = [sys.executable, "-c", TRITON_ON_CPU + _EACH_JOB, plan]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env=env)
    written, rest = [], done.stdout
    for job in jobs:
        code = "".join(p.read_text() for p in job.cache.rglob("*.py"))
        kernels = sorted(set(re.findall(r"def (triton_\w+)\(", code)))
        printed, ended, rest = rest.partition(f"{job.cache}: script ended\n")
        output = done.stdout + done.stderr
        written.append(Written(job.cache, kernels, printed if ended else None, output))
    return written
