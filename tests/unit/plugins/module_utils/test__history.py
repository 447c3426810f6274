"""The deploy history: atomic file, last good, trimming, what is never pruned (module_utils/_history,
through the kdtree_history module). The restore of a last good deploy against the service role's
drop-in rule is tests/roles/test_history.py."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history
from ansible_collections.kdtree.fleet.tests.unit.helpers.histories import deploy, params


def test_begin_and_finish_write_a_root_only_file_atomically(tmp_path):
    path = tmp_path / "kdtree" / "state.json"
    entry = deploy(path, "A", "healthy", build_id="b1", mode="validate", ignored="x")
    data = json.loads(path.read_text())
    assert data["format"] == history.FORMAT
    [saved] = data["entries"]
    assert saved["id"] == entry["id"] and saved["result"] == "healthy" and saved["ended"]
    assert saved["dropin_digest"] == history.digest("A") and "ignored" not in saved
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary file left


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "state.json"
    out = kdtree_history.run(params(path, action="begin", record={"dropin": "A"}), True)
    assert out["changed"] and not path.exists()


def test_last_good_is_the_newest_healthy_deploy_unlike_the_live_drop_in(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "healthy", build_id="b")
    deploy(path, "C", "rolled_back", build_id="c")
    live.write_text("C")
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "b"
    live.write_text("B")  # B is live: previous means A
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "a"
    live.unlink()  # nothing live (after a rollback to stock): the newest healthy one
    assert kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]["build_id"] == "b"


def test_a_second_rollback_to_previous_stays_where_the_first_went(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    a = deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "rolled_back", build_id="b")
    deploy(path, "A", "healthy", build_id="a", restored_from=a["id"])
    live.write_text("A")
    good = kdtree_history.run(params(path, dropin_path=str(live)), False)["last_good"]
    assert good["restored_from"] == a["id"]  # already there: the rollback changes nothing


def test_no_healthy_deploy_means_no_last_good(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "rolled_back")
    assert kdtree_history.run(params(path), False)["last_good"] is None


def test_trimming_keeps_the_last_good_and_names_every_kept_build(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy", build_id="good", patch_dir="/p/good")
    for i in range(5):
        deploy(path, f"X{i}", "rolled_back", build_id=f"bad{i}", patch_dir=f"/p/{i}")
    out = kdtree_history.run(params(path, action="begin", record={"build_id": "new"}, keep=3), False)
    assert [e.get("build_id") for e in out["entries"]] == ["good", "bad3", "bad4", "new"]
    assert out["referenced"]["build_ids"] == ["bad3", "bad4", "good", "new"]
    assert "/p/good" in out["referenced"]["patch_dirs"]


def test_a_file_that_is_not_a_history_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(history.HistoryError, match="not a kdtree deploy history"):
        kdtree_history.run(params(path, action="begin"), False)
    assert json.loads(path.read_text()) == {"something": "else"}


def test_finish_of_an_unknown_deploy_fails(tmp_path):
    with pytest.raises(history.HistoryError, match="no deploy"):
        kdtree_history.run(params(tmp_path / "s.json", action="finish", id="nope", result="healthy"), False)


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy")
    before = path.read_text()

    def broken(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(history.HistoryError, match="disk full"):
        deploy(path, "B", "healthy")
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_rescue_never_goes_back_to_the_drop_in_that_just_failed(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy", build_id="a")
    deploy(path, "B", "healthy", build_id="b")
    deploy(path, "B", "rolled_back", build_id="b2")  # B again (same drop-in), failed; the rescue removed it
    out = kdtree_history.run(params(path, unlike_digest=history.digest("B")), False)
    assert out["last_good"]["build_id"] == "a"


# --- issue 19: the history's directory, concurrent writers, non-UTF-8 drop-ins, re-rendered restores


def test_the_history_directory_is_checked_like_the_build_root_on_every_call(tmp_path):
    home = tmp_path / "kdtree"
    path = home / "state.json"
    deploy(path, "A", "healthy")
    for action in ("read", "begin"):
        home.chmod(0o770)
        with pytest.raises(history.HistoryError, match=r"770 \d+ .*kdtree"):
            kdtree_history.run(params(path, action=action, record={"dropin": "B"}), False)
        home.chmod(0o700)
    tmp_path.chmod(0o757)  # a parent others can write to (not sticky)
    with pytest.raises(history.HistoryError, match="757"):
        kdtree_history.run(params(path), False)
    tmp_path.chmod(0o755)
    link = tmp_path / "linked"
    link.symlink_to(home)
    with pytest.raises(history.HistoryError, match="a symlink"):
        kdtree_history.run(params(link / "state.json"), False)
    assert len(kdtree_history.run(params(path), False)["entries"]) == 1


def test_a_history_file_others_can_write_is_refused(tmp_path):
    path = tmp_path / "state.json"
    deploy(path, "A", "healthy")
    path.chmod(0o666)
    with pytest.raises(history.HistoryError, match="only root"):
        kdtree_history.run(params(path), False)


def _writer(path: str, name: str, count: int) -> None:
    for index in range(count):
        kdtree_history.run(
            params(path, action="begin", record={"dropin": f"{name}-{index}"}, keep=1000), False
        )


def test_concurrent_writers_lose_no_entry(tmp_path):
    path = str(tmp_path / "state.json")
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_writer, args=(path, f"w{i}", 8)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(worker.exitcode == 0 for worker in workers)
    entries = history.load(path)
    assert sorted(e["dropin"] for e in entries) == sorted(f"w{i}-{j}" for i in range(6) for j in range(8))


def test_a_live_drop_in_that_is_not_utf8_has_a_digest_of_its_bytes(tmp_path):
    path = tmp_path / "state.json"
    live = tmp_path / "50-kdtree.conf"
    live.write_bytes(b"[Service]\nEnvironment=X=\xff\xfe\n")
    out = kdtree_history.run(params(path, dropin_path=str(live)), False)
    assert out["live_dropin_digest"] == hashlib.sha256(live.read_bytes()).hexdigest()
    assert history.digest("ä") == hashlib.sha256("ä".encode()).hexdigest()
