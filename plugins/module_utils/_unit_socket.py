"""Which process listens on the health URL's port: the watched unit's, or another one.

An answer on the health port proves the unit healthy only when the unit owns the listening socket.
listeners() reads /proc/net/tcp and /proc/net/tcp6 (LISTEN sockets of the port, by inode);
owner() looks for those inodes among the unit's processes' /proc/PID/fd first, then among all
processes, and names the owner.

Stdlib only and without imports of other module_utils (scripts/testhosts/hostread.py sends the
source of the host-side module_utils to a test host's bare python3).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_LISTEN = "0A"
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass
class Owner:
    """The process that listens on the port; in_unit says whether it is one of the unit's."""

    pid: int
    comm: str
    in_unit: bool


def url_port(url: str) -> int | None:
    """The TCP port of a health URL, None when it has none that can be told."""
    try:
        parsed = urllib.parse.urlsplit(url)
        return parsed.port or DEFAULT_PORTS.get(parsed.scheme)
    except ValueError:
        return None


def parse_tcp_table(text: str, port: int) -> set[int]:
    """Inodes of the LISTEN sockets on `port` in one /proc/net/tcp{,6} table."""
    inodes = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        _host, _sep, hex_port = fields[1].rpartition(":")
        try:
            if int(hex_port, 16) == port and int(fields[9]) != 0:
                inodes.add(int(fields[9]))
        except ValueError:
            continue
    return inodes


def listeners(port: int, tables: tuple[str, ...] = TCP_TABLES) -> set[int]:
    """Inodes of the sockets listening on `port` in this network namespace."""
    inodes: set[int] = set()
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as handle:
                inodes |= parse_tcp_table(handle.read(), port)
        except OSError:
            continue
    return inodes


def _holds(pid: int, inodes: set[int]) -> bool:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
        except OSError:
            continue
    return False


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def owner(inodes: set[int], unit_pids: list[int]) -> Owner | None:
    """Who holds one of `inodes`: a unit process (checked first, in the order given) or another
    process; None when no readable /proc/PID/fd holds them."""
    if not inodes:
        return None
    for pid in unit_pids:
        if _holds(pid, inodes):
            return Owner(pid=pid, comm=_comm(pid), in_unit=True)
    unit = set(unit_pids)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in unit and _holds(int(entry), inodes):
            return Owner(pid=int(entry), comm=_comm(int(entry)), in_unit=False)
    return None
