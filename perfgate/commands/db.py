"""`perfgate db`: the history database's schema — upgrade it, say or record its revision."""

from __future__ import annotations

import argparse
from typing import Any

from perfgate.commands import add_command
from perfgate.settings import HISTORY_OPTIONS, Settings, add_options


def register(commands: Any) -> None:
    parser = add_command(commands, "db")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = actions.add_parser(
        "upgrade",
        help="bring the history to this perfgate's schema (creating it if needed)",
        description="Apply the schema migrations this perfgate ships, in one transaction under "
        "a lock (every perfgate command does this on open; this does only that). A history "
        "written by a newer perfgate is refused untouched (exit 64).",
    )
    current = actions.add_parser(
        "current", help="print the history's schema revision and this perfgate's newest"
    )
    stamp = actions.add_parser(
        "stamp",
        help="record the history's schema revision, when its own record is lost or wrong",
        description="Record REVISION as the history's schema revision (the repair of an "
        "alembic_version table that was dropped, emptied, doubled or set by hand), if the "
        "history's tables, columns and indexes are those of REVISION; nothing else changes.",
    )
    stamp.add_argument(
        "revision", metavar="REVISION", help="e.g. the newest, `db current` names it"
    )
    for action, handler in (
        (upgrade, handle_upgrade),
        (current, handle_current),
        (stamp, handle_stamp),
    ):
        add_options(action.add_argument, HISTORY_OPTIONS)
        action.set_defaults(handler=handler)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def handle_upgrade(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import upgrade_history
    from perfgate.store.database import describe, parse_history_url

    url = settings.history_url
    before = upgrade_history(url)
    where = describe(parse_history_url(url))
    if before.is_current:
        print(f"{where}: schema revision {before.head}, already the newest")
    else:
        print(f"{where}: schema revision {before.current or 'none'} -> {before.head}")
    return 0


def handle_current(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import inspect_history, missing_history
    from perfgate.store.database import describe, parse_history_url
    from perfgate.store.schema import check_schema

    url = settings.history_url
    state = inspect_history(url)
    where = describe(parse_history_url(url))
    check_schema(state, where)  # a newer perfgate's, or not perfgate's: one line, exit 64
    if state.current is None and not state.tables:
        raise missing_history(url)
    if state.current is None:
        note = f"created before schema versions: `perfgate db upgrade` brings it to {state.head}"
    elif state.is_current:
        note = "the newest this perfgate knows"
    else:
        note = f"older than this perfgate's {state.head}: `perfgate db upgrade` upgrades it"
    print(f"{where}: schema revision {state.current or 'none'} ({note})")
    return 0


def handle_stamp(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import inspect_history, missing_history, stamp_history
    from perfgate.store.database import describe, parse_history_url

    url = settings.history_url
    found = inspect_history(url)
    if not found.tables and not found.version_table:
        raise missing_history(url)  # nothing to stamp: create no file nor table
    before = stamp_history(url, args.revision)
    recorded = ", ".join(before.version_rows) or "none"
    where = describe(parse_history_url(url))
    print(f"{where}: schema revision {recorded} -> {args.revision} (its tables are at it)")
    return 0
