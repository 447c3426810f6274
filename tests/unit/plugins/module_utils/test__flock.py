"""held(): the block runs under an exclusive flock() of the descriptor, which is closed after it."""

from __future__ import annotations

import fcntl
import os

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._flock import held


def _free(path) -> bool:
    """Whether another open file description of `path` can take the exclusive lock at once."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_the_block_holds_the_lock_and_the_descriptor_is_closed_after(tmp_path):
    path = tmp_path / "guard"
    path.touch()
    fd = os.open(path, os.O_RDONLY)
    with held(fd):
        assert not _free(path)
    assert _closed(fd) and _free(path)


def test_an_error_in_the_block_still_closes_the_descriptor_and_drops_the_lock(tmp_path):
    path = tmp_path / "guard"
    path.touch()
    fd = os.open(path, os.O_RDONLY)
    with pytest.raises(RuntimeError), held(fd):
        raise RuntimeError("inside")
    assert _closed(fd) and _free(path)
