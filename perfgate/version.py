"""perfgate's own version, as installed (the fingerprint records it, the export writes it)."""

from __future__ import annotations

from importlib import metadata


def perfgate_version() -> str:
    try:
        return metadata.version("perfgate")
    except metadata.PackageNotFoundError:
        return "0+unknown"
