"""Who listens on a port: the server perfgate started, or a process that took its port first.

perfgate picks a free port, and the server binds it minutes later (SGLang loads the model
first): a process that binds it in between answers `/health` and every request. Linux says who
holds each listening socket: `/proc/net/tcp{,6}` lists the sockets with their inodes, and
`/proc/PID/fd` links each process's open sockets to those inodes. The same for both engines;
where there is no /proc (macOS), nothing can be told.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterable
from pathlib import Path

from perfgate.engines import supervise
from perfgate.progress import clean_line

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
WILDCARDS = {"0.0.0.0", "::", "::ffff:0.0.0.0"}
HIDDEN = "a process this user cannot see"


def foreign_listeners(host: str, port: int, server_pid: int) -> list[str] | None:
    """Who else listens on `host`:`port` (or a wildcard address with that port): `pid N
    (command)` for each socket held by neither `server_pid` nor a process below it; [] when
    the server holds them all; None where /proc cannot tell."""
    if not Path("/proc/net/tcp").exists():
        return None
    inodes = listening_inodes(host, port)
    ours = socket_inodes([server_pid, *supervise.descendants(server_pid)])
    strangers = {inode for inode in inodes if inode not in ours}
    if inodes and not strangers:
        return []
    return holders(strangers) or [HIDDEN]


def listening_inodes(host: str, port: int, proc: Path = Path("/proc")) -> list[int]:
    """The inodes of the sockets listening on `port` at `host` or a wildcard address."""
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and _address(address) in {host, *WILDCARDS}:
                found.append(int(fields[9]))
    return found


def _address(hex_address: str) -> str:
    # /proc/net/tcp{,6} prints each 32-bit word of the address in the host's byte order.
    raw = bytes.fromhex(hex_address)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    text = socket.inet_ntop(socket.AF_INET6, raw)
    return text.removeprefix("::ffff:") if text.startswith("::ffff:") and "." in text else text


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """The inodes of the sockets the processes `pids` hold open."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def holders(inodes: set[int]) -> list[str]:
    """`pid N (command)` of each process this user can see that holds one of `inodes`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        if socket_inodes([int(entry.name)]) & inodes:
            with contextlib.suppress(OSError):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"pid {entry.name} ({clean_line(command)[:80]})")
    return found
