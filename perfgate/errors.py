"""Errors a user can act on, and the exit codes perfgate documents.

Exit codes (the same for `perfgate ...` and `pytest perfgate/suites`):

====  =====================================================================
code  meaning
====  =====================================================================
0     pass: every verdict is ``pass`` or ``improvement``, outputs equivalent
1     regression: a gated metric regressed, or outputs are not equivalent
64    bad input or config: a config, baseline or flag is wrong (fix it)
69    infrastructure failure: a server did not start, a device is busy
75    inconclusive: the noise was too high to decide; run again
====  =====================================================================

64, 69 and 75 are ``EX_USAGE``, ``EX_UNAVAILABLE`` and ``EX_TEMPFAIL`` of BSD ``sysexits.h``;
they stay clear of pytest's own codes (2 interrupted, 3 internal error, 4 usage, 5 no tests).
"""

from __future__ import annotations

import enum
from pathlib import Path


class ExitCode(enum.IntEnum):
    PASS = 0
    REGRESSION = 1
    BAD_INPUT = 64
    INFRASTRUCTURE = 69
    INCONCLUSIVE = 75
    INTERNAL = 70  # an error perfgate did not expect: a bug, never a verdict


class PerfgateError(Exception):
    """Base of perfgate's errors; carries the exit code the process should end with.

    ``str(error)`` is one line a user can act on; ``detail`` (a log tail, say) may follow it.
    """

    exit_code: ExitCode = ExitCode.BAD_INPUT
    detail: str = ""


class InternalError(PerfgateError):
    """An exception perfgate did not expect, named where it happened: a bug, never a verdict."""

    exit_code = ExitCode.INTERNAL

    def __init__(self, where: str, error: BaseException, *, detail: str = "") -> None:
        self.detail = detail
        super().__init__(
            f"{where} failed unexpectedly ({type(error).__name__}: {error}); this is a bug in"
            " perfgate, not a verdict: please report it with the traceback"
        )


class ConfigError(PerfgateError):
    """A user mistake in a file, field or flag: says where and how to fix it.

    ``str(error)`` is one line: ``<where>: <problem>; <fix>``.
    """

    exit_code = ExitCode.BAD_INPUT

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.field = field
        self.fix = fix
        super().__init__(self._render())

    def _render(self) -> str:
        where = ":".join(part for part in (self.file, self.field) if part)
        text = f"{where}: {self.problem}" if where else self.problem
        return f"{text}; {self.fix}" if self.fix else text


class InfrastructureError(PerfgateError):
    """The machine, not the user's input, failed: a server died, a port or device was busy."""

    exit_code = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str, *, detail: str = "") -> None:
        self.detail = detail
        super().__init__(message)
