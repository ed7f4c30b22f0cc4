"""How long a test waits on a child process before it calls the child hung.

A limit is a guard against a hang, never a measure of speed: a correct child on a slow or
loaded machine must never reach it. The suite's slowest child takes well under a minute on two
cores; this is thirty times that.
"""

from __future__ import annotations

HANG_S = 1800.0  # seconds
