"""The controller's meeting point of one run's hosts (plugin_utils/_rendezvous): a wait ends when every
member posted, when one posted failed (to the phase or to abort), or at the timeout, where silence counts
as failure; words of another run are never read; a directory or record another user could have placed
is refused."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rendezvous as rv

MEMBERS = ["n0", "n1"]


class Clock:
    """A clock that moves only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def meet(tmp_path: Path, name: str = "group-a", run: str = "run-1") -> rv.Rendezvous:
    return rv.Rendezvous(name, run=run, base=tmp_path / "base")


def test_the_wait_ends_ok_once_every_member_posted_ok(tmp_path: Path) -> None:
    meeting = meet(tmp_path)
    meeting.post("ready", "n0", "ok", {"rank": 0})
    meeting.post("ready", "n1", "ok", {"rank": 1})
    seen = meeting.wait("ready", MEMBERS, 10)
    assert seen.ok and seen.failed_members == [] and seen.missing == []
    assert seen.posts["n1"] == {"state": "ok", "data": {"rank": 1}}


def test_a_member_that_posted_failed_ends_the_wait_at_once(tmp_path: Path) -> None:
    meeting, clock = meet(tmp_path), Clock()
    meeting.post("verdict", "n1", "failed", {"why": "crashed"})
    seen = meeting.wait("verdict", MEMBERS, 600, clock=clock, sleep=clock.sleep)
    assert not seen.ok and seen.failed_members == ["n1"] and seen.missing == ["n0"]
    assert clock.now == 0.0


def test_a_word_posted_to_abort_ends_every_phase_s_wait(tmp_path: Path) -> None:
    meeting, clock = meet(tmp_path), Clock()
    meeting.post("ready", "n0", "ok")
    meeting.post(rv.ABORT, "n1", "failed", {"why": "build failed"})
    seen = meeting.wait("ready", MEMBERS, 600, clock=clock, sleep=clock.sleep)
    assert seen.failed_members == ["n1"] and seen.posts["n1"]["data"] == {"why": "build failed"}


def test_silence_until_the_timeout_counts_as_failure(tmp_path: Path) -> None:
    meeting, clock = meet(tmp_path), Clock()
    meeting.post("ready", "n0", "ok")
    seen = meeting.wait("ready", MEMBERS, 5, clock=clock, sleep=clock.sleep)
    assert not seen.ok and seen.failed_members == ["n1"] and seen.missing == ["n1"]
    assert 5 <= clock.now < 5 + 2 * rv.POLL_S


def test_a_wait_sees_a_word_posted_while_it_waits(tmp_path: Path) -> None:
    meeting = meet(tmp_path)
    meeting.post("stopped", "n0", "ok")
    later = threading.Timer(0.5, lambda: meet(tmp_path).post("stopped", "n1", "ok"))
    later.start()
    started = time.monotonic()
    seen = meeting.wait("stopped", MEMBERS, 30)
    later.join()
    assert seen.ok and 0.4 < time.monotonic() - started < 10


def test_words_of_another_run_or_rendezvous_are_not_read(tmp_path: Path) -> None:
    meet(tmp_path, run="run-0").post("ready", "n1", "ok")
    meet(tmp_path, name="group-b").post("ready", "n1", "ok")
    seen = meet(tmp_path).wait("ready", MEMBERS, 0)
    assert seen.posts == {} and seen.missing == MEMBERS


def test_names_that_are_paths_stay_inside_the_rendezvous(tmp_path: Path) -> None:
    meeting = meet(tmp_path, name="../../escape")
    meeting.post("..", "../n0", "ok")
    assert meeting.wait("..", ["../n0"], 0).ok
    assert not (tmp_path / "escape").exists()
    assert all(p.resolve().is_relative_to(tmp_path / "base") for p in (tmp_path / "base").rglob("*"))


def test_a_directory_open_to_other_users_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    os.chmod(base, 0o777)
    with pytest.raises(rv.RendezvousError, match="open to other users"):
        meet(tmp_path)


def test_a_linked_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "base").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(rv.RendezvousError, match="not a directory"):
        meet(tmp_path)


def test_a_record_that_is_not_the_members_own_is_refused(tmp_path: Path) -> None:
    meeting = meet(tmp_path)
    meeting.post("ready", "n0", "ok")
    record = next((meeting.dir).rglob("*n0.json"))
    record.write_text('{"host": "n1", "state": "ok"}')
    with pytest.raises(rv.RendezvousError, match="not n0's rendezvous record"):
        meeting.wait("ready", MEMBERS, 0)
    record.write_text('{"host": "n0", "state": "maybe"}')
    with pytest.raises(rv.RendezvousError, match="not a rendezvous word"):
        meeting.wait("ready", MEMBERS, 0)
    os.chmod(record, 0o666)
    with pytest.raises(rv.RendezvousError, match="not a record of this user's"):
        meeting.wait("ready", MEMBERS, 0)


def test_a_state_that_is_not_ok_or_failed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(rv.RendezvousError, match="state 'done'"):
        meet(tmp_path).post("ready", "n0", "done")


def test_the_run_key_names_a_process_and_its_start(tmp_path: Path) -> None:
    key = rv.run_key(os.getpid())
    pid, _, started = key.partition("-")
    assert int(pid) == os.getpid() and started.isdigit() and started != "0"


def test_a_sweep_removes_the_runs_whose_process_is_gone_only(tmp_path: Path) -> None:
    base = tmp_path / "base"
    live = rv.run_key(os.getpid())
    rv.Rendezvous("g", run=live, base=base).post("ready", "n0", "ok")
    rv.Rendezvous("g", run="999999999-1", base=base).post("ready", "n0", "ok")
    assert rv.sweep(base) == ["999999999-1"]
    assert [p.name for p in base.iterdir()] == ["n-" + live]
