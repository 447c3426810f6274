"""The host lock: exclusive, names its holder, released only by its run, broken only on request."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _lock as lock

A = {"run_id": "run-a", "owner": "alice@ctl", "play": "deploy"}
B = {"run_id": "run-b", "owner": "bob@ctl", "play": "rollback"}


def test_a_second_run_is_refused_with_the_holder_named(tmp_path):
    path = str(tmp_path / "lock.json")
    assert lock.acquire(path, A, break_lock=False, check_mode=False)["changed"]
    with pytest.raises(lock.LockHeld, match=r"alice@ctl \(play 'deploy', run run-a, since .*, \d+ s ago\)"):
        lock.acquire(path, B, break_lock=False, check_mode=False)
    assert json.loads((tmp_path / "lock.json").read_text())["run_id"] == "run-a"


def test_the_same_run_takes_it_again_without_change(tmp_path):
    path = str(tmp_path / "lock.json")
    lock.acquire(path, A, break_lock=False, check_mode=False)
    assert lock.acquire(path, A, break_lock=False, check_mode=False) == {"changed": False, "broken": None}


def test_only_the_holder_releases_it(tmp_path):
    path = str(tmp_path / "lock.json")
    lock.acquire(path, A, break_lock=False, check_mode=False)
    assert lock.release(path, "run-b", check_mode=False)["held_by"]["owner"] == "alice@ctl"
    assert (tmp_path / "lock.json").exists()
    assert lock.release(path, "run-a", check_mode=False)["changed"]
    assert not (tmp_path / "lock.json").exists()


def test_a_stale_lock_is_broken_only_when_asked_and_reported(tmp_path):
    path = str(tmp_path / "lock.json")
    lock.acquire(path, A, break_lock=False, check_mode=False)  # then the run is killed
    with pytest.raises(lock.LockHeld):
        lock.acquire(path, B, break_lock=False, check_mode=False)
    out = lock.acquire(path, B, break_lock=True, check_mode=False)
    assert out["broken"]["run_id"] == "run-a"
    assert json.loads((tmp_path / "lock.json").read_text())["run_id"] == "run-b"


def test_check_mode_refuses_a_held_lock_and_writes_nothing(tmp_path):
    path = str(tmp_path / "lock.json")
    assert lock.acquire(path, A, break_lock=False, check_mode=True)["changed"]
    assert not (tmp_path / "lock.json").exists()
    lock.acquire(path, A, break_lock=False, check_mode=False)
    with pytest.raises(lock.LockHeld):
        lock.acquire(path, B, break_lock=False, check_mode=True)


def test_the_lock_file_is_root_only_and_never_followed_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    link = tmp_path / "lock.json"
    link.symlink_to(target)
    # a planted link reads as a foreign (unreadable) lock: refused, the target untouched
    with pytest.raises(lock.LockHeld):
        lock.acquire(str(link), A, break_lock=False, check_mode=False)
    assert target.read_text() == "keep"
    path = tmp_path / "real" / "lock.json"
    lock.acquire(str(path), A, break_lock=False, check_mode=False)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
