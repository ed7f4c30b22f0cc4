"""A throwaway PostgreSQL server for the tests: Debian's initdb and pg_ctl, on 127.0.0.1.

The server lives in a temporary folder on a free port and is stopped and removed afterwards.
PostgreSQL refuses to run as root, so under root (CI) it runs as the `postgres` user that
Debian's package creates. Each test gets a database of its own (`fresh_database`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy

from ..hang import HANG_S

REQUIRE_ENV = "PERFGATE_REQUIRE_POSTGRES"
BINDIR_ENV = "PERFGATE_POSTGRES_BINDIR"
SUPERUSER = "perfgate"


class PostgresUnavailable(Exception):
    """No PostgreSQL server can be started here; the message says why."""


@dataclass(frozen=True)
class PostgresServer:
    port: int
    root: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


def find_bindir() -> Path:
    """$PERFGATE_POSTGRES_BINDIR, else the newest installed PostgreSQL's (Debian layout)."""
    if os.environ.get(BINDIR_ENV):
        bindir = Path(os.environ[BINDIR_ENV])
        if not (bindir / "pg_ctl").exists():
            raise PostgresUnavailable(f"{BINDIR_ENV}={bindir} holds no pg_ctl")
        return bindir
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    if not found:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql)"
        )
    return Path(found[-1]).parent


def _run_as() -> str | None:
    """The user to run the server as: `postgres` under root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("running as root and there is no `postgres` user") from None
    return "postgres"


def _folder_for(user: str | None) -> str | None:
    """Where the server's folder goes: the temporary folder (None), unless the server's user
    cannot enter it (a TMPDIR made by `mktemp -d` under root is root's alone), then /tmp."""
    if user is None:
        return None
    enter = subprocess.run(
        ["test", "-x", tempfile.gettempdir()], user=user, timeout=HANG_S, check=False
    )
    return None if enter.returncode == 0 else "/tmp"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a PostgreSQL server for the duration of the block."""
    bindir, user = find_bindir(), _run_as()
    root = Path(tempfile.mkdtemp(prefix="perfgate-pg-", dir=_folder_for(user)))
    if user is not None:
        shutil.chown(root, user=user)
    data, log = root / "data", root / "server.log"

    def tool(*args: str) -> None:
        result = subprocess.run(
            [str(bindir / args[0]), *args[1:]],
            user=user,
            cwd=root,  # a folder the server's user can enter (the checkout may not be)
            capture_output=True,
            text=True,
            timeout=HANG_S,
            check=False,
        )
        if result.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PostgresUnavailable(f"{args[0]} failed: {result.stderr.strip()} {tail}")

    tool("initdb", "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
         "--locale=C", "--no-sync")  # fmt: skip
    port = _free_port()
    # A disposable server: durability off (the tests kill clients, never this server).
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    options += " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    try:
        tool("pg_ctl", "start", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60")
        yield PostgresServer(port, root)
    finally:
        subprocess.run(
            [str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate"],
            user=user,
            cwd=root,
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def fresh_database(server: PostgresServer) -> Iterator[str]:
    """A new, empty database on `server` for the block; its URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    _admin(server, f'CREATE DATABASE "{name}"')
    try:
        yield server.url(name)
    finally:
        _admin(server, f'DROP DATABASE "{name}" WITH (FORCE)')


def _admin(server: PostgresServer, statement: str) -> None:
    # A connection of its own, closed at once: no pool outlives the statement (tests fork).
    engine = sqlalchemy.create_engine(server.url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(statement)
    finally:
        engine.dispose()
