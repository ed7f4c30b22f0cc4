"""How long a test waits on a child process before it calls the child hung.

A limit is a guard against a hang, never a measure of speed: a correct child on a slow or
loaded machine must never reach it. The suite's slowest child took 89 s on a fresh 2-core
clone (benchmarks/gpu_real_weights.sh --smoke, caches empty); this is twenty times that. Every
wait on a child, a server's start or a request that does real work takes it.
"""

from __future__ import annotations

HANG_S = 1800.0  # seconds
