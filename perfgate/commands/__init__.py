"""The CLI's commands: each module has `register(subparsers)` and a handler."""

from perfgate.commands import baseline, db, gate, history, report, run, servers

COMMANDS = (run, servers, gate, baseline, report, history, db)
