"""A phase of the embedded engine slowed on purpose by a stated fraction, to validate the gate.

A team that wants to know whether its gate sees a 2% slower verify needs a change of exactly
that size, measured the way a real change is. The embedded engine's ``--debug-slow-phase
PHASE=FRACTION[,PHASE=FRACTION]`` (or ``PERFGATE_DEBUG_SLOW_PHASE``, which reaches every
server perfgate launches) makes each named phase of a speculative server take that fraction
longer: ``verify=0.02`` is verify 2% slower, ``cycle=0.08`` every decode cycle 8% longer
(perfgate.engines.embedded.slowdown does it). It is off unless set, and it only ever validates
the gate: a gating run in CI refuses it (:func:`injection_setting`), and the fingerprint of a
run it slowed names it (:data:`FINGERPRINT_FIELD`), so that run can never become a baseline.

Pure: read by the configuration and the pipeline (to refuse it before any server starts), by
the engine's flags and by the fingerprint, so it lives in the core.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from perfgate import metrics
from perfgate.errors import ConfigError

VARIABLE = "PERFGATE_DEBUG_SLOW_PHASE"
FLAG = "--debug-slow-phase"
# The phases a speculative server can be slowed in: the named phases and the whole cycle.
PHASES: tuple[str, ...] = (*metrics.NAMED_PHASES, metrics.CYCLE)
# At most this many times slower: a validation needs a known change, not a stalled server.
MAX_FRACTION = 100.0
# The fingerprint field that names an injected slowdown (perfgate.fingerprint). A run that
# has it is judged like any other (perfgate.fingerprint.diff_fingerprints leaves the field
# out), never stands as a reference, and is never approved into a baseline.
FINGERPRINT_FIELD = "injected_slowdown"
# The embedded engine's older debugging flag: verify longer by a fixed time, not a fraction.
DELAY_FLAG = "--debug-verify-delay-ms"


def parse_slow_phases(
    text: str | None, *, field: str = FLAG, file: str | Path | None = None
) -> dict[str, float]:
    """The phases ``text`` slows and by what fraction; empty when unset or blank.

    ``field`` names the flag or variable the text came from (and ``file`` the file it is in),
    for the error.

    >>> parse_slow_phases("verify=0.02, cycle=0.5")
    {'verify': 0.02, 'cycle': 0.5}
    >>> parse_slow_phases("")
    {}
    """
    slowed: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        phase, _, raw = part.partition("=")
        phase = phase.strip()
        if phase not in PHASES:
            raise ConfigError(
                f"{part.strip()!r}: no phase {phase!r}",
                file=file,
                field=field,
                fix=f"name one of {', '.join(PHASES)} as PHASE=FRACTION, e.g. verify=0.02",
            )
        slowed[phase] = _fraction(raw, part.strip(), field, file)
    return slowed


def _fraction(raw: str, part: str, field: str, file: str | Path | None) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= MAX_FRACTION:
        raise ConfigError(
            f"{part!r}: the fraction must be a number above 0 and at most {MAX_FRACTION:g}",
            file=file,
            field=field,
            fix="give how much longer the phase takes, e.g. verify=0.02 for 2% slower",
        )
    return value


def describe(slowed: Mapping[str, float]) -> str:
    """The slowdown in words, as the fingerprint shows it: ``verify +2.0%, cycle +50.0%``."""
    return ", ".join(f"{phase} +{fraction:.1%}" for phase, fraction in slowed.items())


def describe_delay(delay_ms: float) -> str:
    """The older fixed verify delay in words, as the fingerprint shows it."""
    return f"verify +{delay_ms:g} ms"


def injection_setting(
    environ: Mapping[str, str],
    env: Mapping[str, str],
    arguments: Mapping[str, Sequence[str]],
) -> tuple[str, str] | None:
    """Where a run is told to slow a phase, and the setting itself; None when nowhere.

    ``environ`` is the process's environment (which every server inherits), ``env`` the
    scenario's own variables, ``arguments`` the scenario's flag lists by field name
    (``extra_args``, ...). Returns the place (the variable, or ``FIELD`` of the scenario)
    and what it says.

    >>> injection_setting({VARIABLE: "verify=0.02"}, {}, {})
    ('PERFGATE_DEBUG_SLOW_PHASE', 'verify=0.02')
    >>> injection_setting({}, {}, {"spec_extra_args": ["--debug-slow-phase", "cycle=0.1"]})
    ('spec_extra_args', '--debug-slow-phase cycle=0.1')
    >>> injection_setting({VARIABLE: " "}, {}, {}) is None
    True
    """
    for variables in (env, environ):
        value = variables.get(VARIABLE, "")
        if value.strip():
            return VARIABLE, value
    for name, args in arguments.items():
        for given in _flag_values(args):
            return name, f"{FLAG} {given}".strip()
    return None


def _flag_values(args: Sequence[str]) -> Iterator[str]:
    """What each ``--debug-slow-phase`` in ``args`` says (``FLAG=V`` or ``FLAG V``)."""
    for index, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag == FLAG:
            yield value or (args[index + 1] if index + 1 < len(args) else "")


def check_settings(
    name: str,
    environ: Mapping[str, str],
    env: Mapping[str, str],
    arguments: Mapping[str, Sequence[str]],
    file: str | Path | None = None,
) -> None:
    """Read every slowdown setting scenario ``name``'s embedded servers would read, as they
    read it, and raise their ConfigError where one cannot be read, naming the setting: before
    their launch, not after. (Arguments as for :func:`injection_setting`.)"""
    parse_slow_phases(environ.get(VARIABLE), field=VARIABLE)
    parse_slow_phases(env.get(VARIABLE), field=f"scenarios.{name}.env.{VARIABLE}", file=file)
    for field, args in arguments.items():
        for given in _flag_values(args):
            parse_slow_phases(given, field=f"scenarios.{name}.{field}", file=file)


def refuse_in_gating_ci(
    name: str,
    environ: Mapping[str, str],
    env: Mapping[str, str],
    arguments: Mapping[str, Sequence[str]],
    file: str | Path | None = None,
) -> None:
    """Raise a ConfigError naming the setting when scenario ``name``, about to be judged in
    CI, would be slowed on purpose (see :func:`injection_setting`)."""
    found = injection_setting(environ, env, arguments)
    if found is None:
        return
    where, value = found
    field = where if where == VARIABLE else f"scenarios.{name}.{where}"
    raise ConfigError(
        f"{value!r} slows a phase on purpose, and a gating run in CI (CI=true, or "
        "--require-baseline) judges the code as it is",
        file=None if where == VARIABLE else file,
        field=field,
        fix=f"remove it from CI's gating runs: {VARIABLE} and {FLAG} only validate the gate, "
        "outside CI or with --no-gate",
    )
