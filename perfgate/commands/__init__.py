"""The CLI's commands: each module has `register(subparsers)` and a handler."""

from perfgate.commands import (
    baseline,
    ci,
    db,
    doctor,
    embedded,
    gate,
    history,
    profile,
    report,
    run,
    runner,
    servers,
    sweep,
)

COMMANDS = (
    run,
    servers,
    sweep,
    profile,
    gate,
    baseline,
    report,
    history,
    db,
    doctor,
    ci,
    runner,
    embedded,
)
