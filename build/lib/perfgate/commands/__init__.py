"""The CLI's commands: each module has `register(subparsers)` and a handler."""

from perfgate.commands import baseline, db, history, report, run, servers

COMMANDS = (run, servers, baseline, report, history, db)
