"""The host lock: exclusive, names its holder, released only by its run, broken only on request."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import queue
import sys
import threading
import time

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


# --- issue 19: odd content, dangling symlinks, compare-and-swap breaks, a crash gives the lock back

ODD = [
    b"",
    b"not json",
    b"\xff\xfe\x00garbage",
    b"[]",
    b'"a string"',
    b"null",
    b'{"run_id": ["x"], "owner": {"a": 1}, "started_epoch": "soon"}',
    b'{"run_id": "old", "started_epoch": Infinity}',
    b'{"run_id": "old", "started_epoch": NaN, "pid": true}',
    b'{"run_id": "old", "started_epoch": 1e308, "owner": "' + b"o" * 5000 + b'"}',
    b"[" * 100000,
    b'{"run_id": "old"}' + b" " * (lock.MAX_BYTES + 10),
]


@pytest.mark.parametrize("raw", ODD, ids=range(len(ODD)))
def test_any_content_is_a_holder_or_a_named_problem_and_breakable(tmp_path, raw):
    path = tmp_path / "lock.json"
    path.write_bytes(raw)
    with pytest.raises(lock.LockHeld) as info:
        lock.acquire(str(path), A, break_lock=False, check_mode=False)
    assert len(str(info.value)) < 1000 and "\n" not in str(info.value)
    assert all(isinstance(v, (str, int, float)) for v in info.value.holder.values())
    out = lock.acquire(str(path), A, break_lock=True, check_mode=False, since=time.time() + 5)
    assert out["changed"] and lock.describe(out["broken"])
    assert json.loads(path.read_text())["run_id"] == "run-a"


def test_a_directory_at_the_lock_path_is_a_named_problem(tmp_path):
    path = tmp_path / "lock.json"
    path.mkdir()
    with pytest.raises(lock.LockHeld, match="not a regular file"):
        lock.acquire(str(path), A, break_lock=False, check_mode=False)


def test_a_dangling_symlink_is_reported_and_breakable_and_never_followed(tmp_path):
    path = tmp_path / "lock.json"
    target = tmp_path / "nowhere" / "x"
    path.symlink_to(target)
    with pytest.raises(lock.LockHeld, match="dangling symlink"):
        lock.acquire(str(path), A, break_lock=False, check_mode=False)
    out = lock.acquire(str(path), A, break_lock=True, check_mode=False, since=time.time() + 5)
    assert "symlink" in out["broken"]["problem"]
    assert not path.is_symlink() and json.loads(path.read_text())["run_id"] == "run-a"
    assert not target.exists() and not target.parent.exists()


def test_a_lock_taken_after_this_run_started_is_not_broken(tmp_path):
    path = str(tmp_path / "lock.json")
    since = time.time()
    lock.acquire(path, A, break_lock=False, check_mode=False)
    with pytest.raises(lock.LockHeld, match="alice"):
        lock.acquire(path, B, break_lock=True, check_mode=False, since=since)


def _breaker(path: str, run_id: str, since: float, start, results) -> None:
    start.wait()
    try:
        lock.acquire(
            path, {"run_id": run_id, "owner": run_id}, break_lock=True, check_mode=False, since=since
        )
        results.put(run_id)
    except lock.LockHeld:
        results.put("")


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_of_n_concurrent_breakers_of_a_stale_lock_exactly_one_wins(tmp_path, kind):
    path = str(tmp_path / "lock.json")
    for attempt in range(5):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        lock.acquire(path, {"run_id": f"dead-{attempt}"}, break_lock=False, check_mode=False)
        since = time.time() + 0.001  # every breaker started after the dead run took its lock
        time.sleep(0.02)  # and the winner's lock is taken after `since`: the others must see it as new
        ctx = multiprocessing.get_context("fork")
        if kind == "threads":
            start, results = threading.Barrier(8), queue.Queue()
            workers = [
                threading.Thread(target=_breaker, args=(path, f"r{i}", since, start, results))
                for i in range(8)
            ]
        else:
            start, results = ctx.Barrier(8), ctx.Queue()
            workers = [
                ctx.Process(target=_breaker, args=(path, f"r{i}", since, start, results)) for i in range(8)
            ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        won = [r for r in (results.get(timeout=5) for _worker in workers) if r]
        assert len(won) == 1, won
        assert json.loads(open(path).read())["run_id"] == won[0]
        assert not [n for n in os.listdir(tmp_path) if ".broken." in n]


def _run_module(tmp_path, args: dict, monkeypatch, break_describe: bool = False) -> dict:
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes
    from ansible_collections.kdtree.fleet.plugins.modules import kdtree_lock

    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    if break_describe:

        def boom(_holder):
            raise OverflowError("cannot convert float infinity to integer")

        monkeypatch.setattr(kdtree_lock.lock, "describe", boom)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(SystemExit):
        kdtree_lock.main()
    return json.loads(out.getvalue())


def test_the_module_breaks_a_lock_with_odd_values_and_holds_it(tmp_path, monkeypatch):
    path = tmp_path / "lock.json"
    path.write_bytes(b'{"run_id": "dead", "started_epoch": -Infinity, "owner": ["?"]}')
    args = {"run_id": "run-a", "break_lock": True, "path": str(path)}
    result = _run_module(tmp_path, args, monkeypatch)
    assert not result.get("failed"), result
    assert json.loads(path.read_text())["run_id"] == "run-a"


def test_a_crash_of_the_module_after_it_took_the_lock_gives_the_lock_back(tmp_path, monkeypatch):
    path = tmp_path / "lock.json"
    path.write_text('{"run_id": "dead", "owner": "x", "started_epoch": 1}')
    args = {"run_id": "run-a", "break_lock": True, "path": str(path)}
    result = _run_module(tmp_path, args, monkeypatch, break_describe=True)
    assert result["failed"] and "OverflowError" in result["msg"] and "released" in result["msg"]
    assert "exception" not in result
    assert not path.exists()  # not held by run-a, whose release would never run


def test_the_swap_moves_only_the_lock_it_observed(tmp_path):
    path = tmp_path / "lock.json"
    path.write_text('{"run_id": "old"}')
    seen = lock.observe(str(path))
    path.unlink()
    path.write_text('{"run_id": "winner"}')  # another breaker's lock meanwhile (a new inode)
    assert not lock._swap_out(str(path), seen)
    assert json.loads(path.read_text())["run_id"] == "winner"
    assert not [n for n in os.listdir(tmp_path) if ".broken." in n]
    seen = lock.observe(str(path))
    assert lock._swap_out(str(path), seen) and not path.exists()
