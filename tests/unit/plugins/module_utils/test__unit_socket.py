"""Who listens on the health URL's port (plugins/module_utils/_unit_socket.py)."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

unit_socket = importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._unit_socket")

# /proc/net/tcp as the kernel writes it: 30000 (0x7530) listening on 127.0.0.1 (inode 4242), a
# connection from it (01 = ESTABLISHED, inode 4343), another port listening (inode 99).
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0
   1: 0100007F:7530 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0
"""
ZERO6 = "0" * 32
TCP6 = (
    "  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode\n"
    f"   0: {ZERO6}:7530 {ZERO6}:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5151 1 0\n"
)


def test_listening_sockets_of_the_port_by_inode():
    assert unit_socket.parse_tcp_table(TCP, 30000) == {4242}
    assert unit_socket.parse_tcp_table(TCP6, 30000) == {5151}
    assert unit_socket.parse_tcp_table(TCP, 22) == {99}
    assert unit_socket.parse_tcp_table("header only\n", 30000) == set()


@pytest.mark.parametrize(
    ("url", "port"),
    [("http://127.0.0.1:30000/health", 30000), ("http://h/health", 80), ("https://h/x", 443), ("x", None)],
)
def test_the_port_of_a_health_url(url, port):
    assert unit_socket.url_port(url) == port


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_the_owner_is_the_unit_s_process_or_another_named_one():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        inodes = unit_socket.listeners(port)
        assert len(inodes) == 1
        mine = unit_socket.owner(inodes, [os.getpid()])
        assert (mine.pid, mine.in_unit) == (os.getpid(), True)
        # a unit of one other process (a sleeping child): this process is not in it
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            other = unit_socket.owner(inodes, [child.pid])
        finally:
            child.kill()
            child.wait()
        assert (other.pid, other.in_unit) == (os.getpid(), False)
        assert other.comm == Path("/proc/self/comm").read_text().strip()
    assert unit_socket.owner(set(), [os.getpid()]) is None
