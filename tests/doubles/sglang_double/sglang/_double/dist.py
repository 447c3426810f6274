"""TEST DOUBLE of a multi-node server's process group (`--nnodes N --node-rank R --dist-init-addr H:P`).

Upstream each scheduler joins torch.distributed's process group while its model runner is built:
the scheduler of TP rank 0 (on node 0) hosts the TCPStore on the dist-init address, every other
rank connects to it, retrying until the store's timeout, and nobody is ready before all are there.
The double models this per node: the first scheduler of node 0 listens on the dist-init port (all
interfaces, as the TCPStore server does) and waits for the first scheduler of each of the nnodes-1
other nodes; they connect, retrying until SGLANG_DOUBLE_DIST_TIMEOUT, send their node rank, and wait
for the store's "go" (every node joined). The connections stay open while the server runs, as the
process group's do: a peer that goes away closes its end, and `watch` raises `PeerLost` in the
scheduler that held it (gloo's "Connection closed by peer").
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable

_GO = b"go\n"
_RETRY_S = 0.5
_HELLO_S = 5.0


class PeerLost(RuntimeError):
    """A node of the process group went away (its connection closed)."""


class DistTimeout(RuntimeError):
    """The process group did not form within the store's timeout."""


def parse_dist_init_addr(addr: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) of --dist-init-addr."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--dist-init-addr must be HOST:PORT, got {addr!r}")
    return host.strip("[]"), int(port)


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise DistTimeout("timed out reading from the process group's store")
        sock.settimeout(left)
        chunk = sock.recv(64)
        if not chunk:
            raise PeerLost("Connection closed by peer while the process group was forming")
        data += chunk
    sock.settimeout(None)
    return data


def serve_store(addr: str, nnodes: int, timeout: float) -> list[socket.socket]:
    """Node 0: listen on the dist-init port, accept one connection from each other node, then tell
    every node to go. Raises DistTimeout (the TCPStore server's message) when some never joined."""
    _, port = parse_dist_init_addr(addr)
    server = socket.create_server(("", port), reuse_port=False)
    peers: dict[int, socket.socket] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(peers) < nnodes - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistTimeout(
                    f"Timed out after {timeout:g} seconds waiting for clients. "
                    f"{len(peers) + 1}/{nnodes} clients joined."
                )
            server.settimeout(left)
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            try:  # a node says its rank at once: a stray connection that says nothing is dropped
                rank = int(_read_line(conn, min(deadline, time.monotonic() + _HELLO_S)).strip())
            except (ValueError, PeerLost, DistTimeout, OSError):
                conn.close()  # not a node of this group (or gone at once): keep waiting
                continue
            if rank in peers or not 0 < rank < nnodes:
                conn.close()
                raise RuntimeError(f"node rank {rank} joined the process group twice or is out of range")
            peers[rank] = conn
        for conn in peers.values():
            conn.sendall(_GO)
    except BaseException:
        for conn in peers.values():
            conn.close()
        raise
    finally:
        server.close()
    return [peers[rank] for rank in sorted(peers)]


def join_store(addr: str, node_rank: int, timeout: float) -> socket.socket:
    """Node > 0: connect to node 0's store, retrying until `timeout` (the TCPStore client's), send
    this node's rank and wait for "go"."""
    host, port = parse_dist_init_addr(addr)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection(
                (host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))
            )
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise DistTimeout(
                    f"The client socket has timed out after {timeout:g}s while trying to connect to "
                    f"({host}, {port})."
                ) from None
            time.sleep(_RETRY_S)
    try:
        sock.sendall(f"{node_rank}\n".encode())
        if _read_line(sock, deadline) != _GO:
            raise RuntimeError("unexpected answer from the process group's store")
    except BaseException:
        sock.close()
        raise
    return sock


def watch(peers: list[socket.socket], poll: float, check: Callable[[], None]) -> None:
    """Block while every peer's connection is open, calling `check` every `poll` seconds (it may
    raise). Raises PeerLost when a peer's end closes."""
    while True:
        check()
        readable, _, _ = select.select(peers, [], [], poll)
        for sock in readable:
            try:
                data = sock.recv(64)
            except OSError:
                data = b""
            if not data:
                try:
                    host, port = sock.getpeername()[:2]
                except OSError:
                    host, port = "?", 0
                raise PeerLost(f"[gloo/transport/tcp/pair.cc] Connection closed by peer [{host}]:{port}")
