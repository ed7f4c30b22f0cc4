"""The session's pointer file: which runs a gate session recorded, and how it ended.

Every gate session (pytest perfgate/suites, perfgate run) leaves ``.perfgate/last-session.json``
beside its config: the ids of the runs it recorded, each scenario's final run, the errors of
scenarios it could not measure, the history and report it used, and its exit code. `perfgate ci
summary` and `perfgate ci annotations` read it, and the runs it names from the history (the
pointer keeps the history's URL with its password hidden: `PERFGATE_DB_URL` or `--db` gives
the real one).

    {"schema": 1, "exit_code": 1, "history": "sqlite:///...", "report": "/.../index.html",
     "profile": "cpu", "runs": [4, 5], "final_runs": {"tiny": 5},
     "errors": [{"scenario": null, "message": "...", "exit_code": 64}], "finished_at": "..."}

The file is removed when a session starts, so a session that ends before writing it (pytest
itself failed, the process was killed) leaves none rather than an older one. An interrupted
session (Ctrl-C) records nothing and puts the earlier session's file back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.errors import ConfigError, PerfgateError
from perfgate.files import write_text_atomically

if TYPE_CHECKING:
    from perfgate.verdict_text import FinishedSession

POINTER = Path(".perfgate") / "last-session.json"
SCHEMA = 1


@dataclass(frozen=True)
class SessionError:
    scenario: str | None
    message: str
    exit_code: int


@dataclass(frozen=True)
class SessionPointer:
    exit_code: int
    history: str | None = None
    report: str | None = None
    profile: str | None = None
    runs: tuple[int, ...] = ()
    final_runs: dict[str, int] = field(default_factory=dict)
    errors: tuple[SessionError, ...] = ()
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "exit_code": self.exit_code,
            "history": self.history,
            "report": self.report,
            "profile": self.profile,
            "runs": list(self.runs),
            "final_runs": dict(self.final_runs),
            "errors": [vars(error) for error in self.errors],
            "finished_at": self.finished_at,
        }


def pointer_path(root: Path) -> Path:
    return root / POINTER


def clear_pointer(root: Path) -> str | None:
    """Remove the pointer an earlier session left (at the start of a session); return its text.

    An interrupted session gives that text back with `restore_pointer`: the earlier session
    is still the last one that finished.
    """
    path = pointer_path(root)
    try:
        text = path.read_text("utf-8")
        path.unlink()
    except (OSError, UnicodeDecodeError):
        return None
    return text


def restore_pointer(root: Path, text: str | None) -> None:
    """Put back the pointer `clear_pointer` removed, unless another session wrote one since."""
    path = pointer_path(root)
    if text is not None and not path.exists():
        write_text_atomically(path, text)


def session_pointer(session: FinishedSession, error: PerfgateError | None) -> SessionPointer:
    """The pointer of a session that ran (`error`: one raised while finishing it)."""
    errors = [
        SessionError(name, str(failure), int(failure.exit_code))
        for name, failure in session.errors().items()
    ]
    if error is not None:
        errors.append(SessionError(None, str(error), int(error.exit_code)))
    from perfgate.store.database import describe, parse_history_url  # SQLAlchemy: only here

    final = {r.measurement.scenario: r.id for r in session.final_records() if r.id is not None}
    return SessionPointer(
        exit_code=int(session.exit_code if error is None else error.exit_code),
        # The password hidden: the pointer is uploaded as an artifact.
        history=describe(parse_history_url(session.history_url)),
        report=str(session.report_path) if session.report_written else None,
        profile=session.profile,
        runs=tuple(r.id for r in session.records if r.id is not None),
        final_runs=final,
        errors=tuple(errors),
    )


def failed_pointer(error: PerfgateError) -> SessionPointer:
    """The pointer of a session refused before it measured anything (bad config, say)."""
    return SessionPointer(
        int(error.exit_code), errors=(SessionError(None, str(error), int(error.exit_code)),)
    )


def write_pointer(root: Path, pointer: SessionPointer) -> Path:
    """Write the pointer (whole, or not at all) and return its path."""
    document = pointer.to_dict() | {"finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    return write_text_atomically(pointer_path(root), text)


def load_pointer(path: Path) -> SessionPointer | None:
    """Read a pointer file; None when there is none (the session did not finish)."""
    try:
        document = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cannot be read ({error})", file=path, fix="run the gate suites again"
        ) from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ConfigError(
            f"is not a schema-{SCHEMA} session pointer",
            file=path,
            fix="run the gate suites again with this perfgate",
        )
    try:
        return SessionPointer(
            exit_code=int(document["exit_code"]),
            history=document.get("history"),
            report=document.get("report"),
            profile=document.get("profile"),
            runs=tuple(int(i) for i in document.get("runs", [])),
            final_runs={str(k): int(v) for k, v in document.get("final_runs", {}).items()},
            errors=tuple(SessionError(**e) for e in document.get("errors", [])),
            finished_at=document.get("finished_at"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ConfigError(
            f"is not a usable session pointer ({type(error).__name__}: {error})",
            file=path,
            fix="run the gate suites again with this perfgate",
        ) from None
