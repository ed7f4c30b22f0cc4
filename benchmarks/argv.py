"""Command lines the benchmarks pass on or write down."""

from __future__ import annotations


def without_flag(argv: list[str], flag: str) -> list[str]:
    """`argv` less `flag` and its value (`--flag V` or `--flag=V`)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(f"{flag}="):
            kept.append(arg)
    return kept
