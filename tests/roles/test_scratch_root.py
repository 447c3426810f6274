"""The scratch roots of the role tests (helpers/scratch_root.py) obey the roles' rule for a root-loaded
directory from any clone: a parent under /tmp (mode 1777) or with group write is passed over, never
handed out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.roles.helpers.scratch_root import scratch_root, unsafe_reason

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the roles' rule wants root-owned directories")


def test_a_directory_under_tmp_is_unsafe_because_of_tmp(tmp_path):
    assert unsafe_reason(tmp_path) == "/tmp is writable by group/others (mode 1777)"


def test_a_group_writable_directory_is_unsafe(tmp_path):
    safe = Path("/var/cache/kdtree-fleet-tests")
    with scratch_root("group-", parents=(safe,)) as base:
        (base / "shared").mkdir(mode=0o775)
        (base / "shared").chmod(0o775)
        assert (
            unsafe_reason(base / "shared" / "below")
            == f"{base / 'shared'} is writable by group/others (mode 775)"
        )


def test_an_unsafe_parent_is_passed_over_and_the_scratch_root_is_safe_and_removed(tmp_path):
    safe = Path("/var/cache/kdtree-fleet-tests")
    with scratch_root("pick-", parents=(tmp_path / "build", safe)) as base:
        assert base.parent == safe and unsafe_reason(base) == ""
        assert (base.stat().st_mode & 0o777) == 0o755
    assert not base.exists()
    assert not (tmp_path / "build").exists()


def test_without_a_safe_parent_it_refuses_and_says_why(tmp_path):
    with pytest.raises(RuntimeError, match="no safe parent for a scratch root: /tmp is writable"):
        with scratch_root("none-", parents=(tmp_path / "a",)):
            pass


def test_the_default_parents_give_a_safe_root_from_this_clone():
    with scratch_root("default-") as base:
        assert unsafe_reason(base) == ""
