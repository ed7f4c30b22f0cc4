"""The values the embedded server's flags choose among, without torch: its parser
(perfgate.engines.embedded.args) and perfgate's checks before launch (perfgate.preflight) read
them here, so a scenario is refused before its server starts, in the server's own terms."""

from __future__ import annotations

SPEC_ALGORITHMS = ("EAGLE3", "EAGLE", "STANDALONE")  # --speculative-algorithm, any case
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # --dtype, besides "auto"
DEVICES = ("auto", "cpu", "cuda")  # --device
