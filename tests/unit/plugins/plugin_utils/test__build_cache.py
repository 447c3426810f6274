"""plugin_utils/_build_cache.py: what kdtree_build trusts in the controller's build cache (ownership,
modes, symlinks), its compile claims (named by their run; a dead run's claim is broken at once), its lock
(never opened through a symlink) and a host's build library (root's, a regular file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _build_cache as bc

OTHER_UID = 4242
SHA = "a" * 64


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A safe cache (tmp_path's parents are root's or ours; /tmp is sticky)."""
    tmp_path.chmod(0o755)
    path = tmp_path / "cache"
    path.mkdir(mode=0o755)
    return path


def _artifact(cache: Path, build_id: str = "b1", sha: str = SHA) -> Path:
    directory = cache / build_id
    directory.mkdir(mode=0o755)
    (directory / "artifact.json").write_text(json.dumps({"sha256": sha, "built_on": "x"}))
    (directory / "libkdtree_verify.so").write_bytes(b"lib")
    for path in directory.iterdir():
        path.chmod(0o644)
    return directory


def test_a_safe_cache_and_a_cache_not_made_yet_are_accepted(cache):
    assert bc.cache_problem(str(cache)) == ""
    assert bc.cache_problem(str(cache / "not" / "yet")) == ""
    assert bc.read_artifact(str(cache), "b1") == ("", {})


def test_a_cache_owned_by_another_user_is_refused(cache):
    os.chown(cache, OTHER_UID, -1)
    assert bc.cache_problem(str(cache)) == (
        f"{cache} is owned by uid {OTHER_UID}, not root or uid 0 (the user running the deploy)"
    )
    # a user's own cache is theirs: accepted for that user
    assert bc.cache_problem(str(cache), uid=OTHER_UID) == ""


def test_a_directory_above_the_cache_owned_by_another_user_is_refused(cache):
    os.chown(cache.parent, OTHER_UID, -1)
    assert bc.cache_problem(str(cache)) == f"{cache.parent} is owned by uid {OTHER_UID}, not root"
    assert f"{cache.parent} is owned by uid {OTHER_UID}" in bc.cache_problem(str(cache / "missing"))


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_a_group_or_world_writable_cache_or_parent_is_refused(cache, mode):
    cache.chmod(mode)
    assert bc.cache_problem(str(cache)) == f"{cache} is group- or world-writable (mode {mode:04o})"
    cache.chmod(0o755)
    cache.parent.chmod(mode)
    assert bc.cache_problem(str(cache)) == f"{cache.parent} is group- or world-writable (mode {mode:04o})"


def test_a_symlinked_cache_is_refused(cache, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(cache)
    assert bc.cache_problem(str(link)) == f"{link} is a symlink (never followed)"


def test_a_symlink_above_the_cache_must_be_owned_by_the_user_or_root(cache, tmp_path):
    (tmp_path / "up").symlink_to(tmp_path)
    assert bc.cache_problem(str(tmp_path / "up" / "cache")) == ""
    os.lchown(tmp_path / "up", OTHER_UID, -1)
    assert bc.cache_problem(str(tmp_path / "up" / "cache")) == (
        f"{tmp_path / 'up'} is a symlink owned by uid {OTHER_UID}, not root"
    )


def test_a_safe_artifact_is_read(cache):
    _artifact(cache)
    assert bc.read_artifact(str(cache), "b1") == ("", {"sha256": SHA, "built_on": "x"})


@pytest.mark.parametrize("name", ["", "artifact.json", "libkdtree_verify.so"])
def test_an_artifact_planted_by_another_user_is_refused(cache, name):
    directory = _artifact(cache)
    os.chown(directory / name, OTHER_UID, -1)
    problem, record = bc.read_artifact(str(cache), "b1")
    assert record == {}
    assert problem == (
        f"{directory / name if name else directory} is owned by uid {OTHER_UID}, not root or uid 0 "
        "(the user running the deploy)"
    )


@pytest.mark.parametrize("name", ["", "artifact.json", "libkdtree_verify.so"])
def test_a_group_writable_artifact_is_refused(cache, name):
    directory = _artifact(cache)
    (directory / name).chmod(0o775 if not name else 0o664)
    problem, _artifact_doc = bc.read_artifact(str(cache), "b1")
    assert problem.startswith(f"{directory / name if name else directory} is group- or world-writable")


@pytest.mark.parametrize("name", ["", "artifact.json", "libkdtree_verify.so"])
def test_a_symlink_in_the_artifact_is_refused(cache, tmp_path, name):
    elsewhere = _artifact(tmp_path, "elsewhere")
    if name:
        directory = _artifact(cache)
        (directory / name).unlink()
        (directory / name).symlink_to(elsewhere / name)
        path = directory / name
    else:
        path = cache / "b1"
        path.symlink_to(elsewhere)
    assert bc.read_artifact(str(cache), "b1") == (f"{path} is a symlink (never followed)", {})


def test_an_incomplete_or_odd_artifact_is_refused(cache):
    directory = _artifact(cache)
    (directory / "libkdtree_verify.so").unlink()
    assert bc.read_artifact(str(cache), "b1")[0] == (
        f"{directory}/libkdtree_verify.so is missing (an incomplete artifact)"
    )
    (directory / "libkdtree_verify.so").write_bytes(b"lib")
    (directory / "artifact.json").write_text('{"sha256": "nope"}')
    assert "is not an artifact record" in bc.read_artifact(str(cache), "b1")[0]
    assert bc.read_artifact(str(cache), "../b1")[0] == "the build id '../b1' is not a plain name"


def test_an_unsafe_cache_refuses_its_artifacts_too(cache):
    _artifact(cache)
    cache.chmod(0o777)
    assert bc.read_artifact(str(cache), "b1") == (f"{cache} is group- or world-writable (mode 0777)", {})


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("0 644 regular file", ""),
        ("0 755 regular file", ""),
        ("1000 644 regular file", "/x is owned by uid 1000, not root"),
        ("0 664 regular file", "/x is group- or world-writable (mode 664)"),
        ("0 646 regular file", "/x is group- or world-writable (mode 646)"),
        ("0 777 symbolic link", "/x is a symbolic link, not a regular file"),
        ("0 755 directory", "/x is a directory, not a regular file"),
        ("", "/x is a missing file, not a regular file"),
    ],
)
def test_a_host_library_is_taken_only_when_root_s_and_a_regular_file(line, problem):
    assert bc.host_lib_problem("/x", line) == problem


# --- the lock


def test_the_lock_is_made_and_opened_as_a_regular_file(tmp_path):
    fd = bc.open_lock(str(tmp_path / "lock"))
    os.close(fd)
    assert (tmp_path / "lock").stat().st_mode & 0o777 == 0o600


def test_the_lock_is_never_opened_through_a_symlink(tmp_path):
    victim = tmp_path / "root-only"
    victim.write_text("precious")
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(bc.CacheError, match=r"the lock .*/lock is a symlink \(never followed\)"):
        bc.open_lock(str(tmp_path / "lock"))
    assert victim.read_text() == "precious"
    assert bc.main(["locked", str(tmp_path / "lock"), "1", "--", "true"]) == 2
    assert victim.read_text() == "precious"


def test_a_lock_that_is_no_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(bc.CacheError, match="is not a regular file"):
        bc.open_lock(str(tmp_path / "fifo"))
    (tmp_path / "dir").mkdir()
    with pytest.raises(bc.CacheError, match="cannot open the lock"):
        bc.open_lock(str(tmp_path / "dir"))


def test_a_command_runs_under_the_lock_and_waits_for_it(tmp_path):
    lock = str(tmp_path / "cache" / "lock")
    assert bc.run_locked(lock, 1, ["sh", "-c", "exit 3"]) == 3
    held = bc.open_lock(lock)
    import fcntl

    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with pytest.raises(bc.CacheError, match="was not free within 0 s"):
            bc.run_locked(lock, 0, ["true"], sleep=lambda _s: None)
    finally:
        os.close(held)


# --- claims


def _gone_run() -> str:
    """The run of a process that ended (a killed ansible-playbook)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    run = bc.controller_run(child.pid)
    child.wait()
    return run


def test_a_run_is_alive_while_its_process_lives_with_the_same_start_time():
    assert bc.run_state(bc.controller_run(os.getpid())) == "alive"
    assert bc.run_state(_gone_run()) == "gone"
    other_start = json.loads(bc.controller_run(os.getpid()))
    other_start["start"] = "1"  # the pid reused by another process
    assert bc.run_state(json.dumps(other_start)) == "gone"
    other_host = json.loads(bc.controller_run(os.getpid()))
    other_host["host"] = "another-controller"
    assert bc.run_state(json.dumps(other_host)) == "unknown"
    assert bc.run_state(None) == "unknown" and bc.run_state("{") == "unknown"


def test_a_claim_names_its_run_and_host(cache):
    run = bc.controller_run(os.getpid())
    assert bc.claim(str(cache), "b1", "host1", run, wait_s=0) == "claimed"
    assert (cache / ".claim-b1" / "run").read_text() == run
    assert (cache / ".claim-b1" / "host").read_text() == "host1\n"


def test_a_claim_of_a_run_that_is_gone_is_broken_at_once(cache):
    said = []
    assert bc.claim(str(cache), "b1", "host1", _gone_run(), wait_s=0) == "claimed"
    start = time.monotonic()
    out = bc.claim(str(cache), "b1", "host2", bc.controller_run(os.getpid()), wait_s=10, say=said.append)
    assert out == "claimed" and time.monotonic() - start < 5
    assert (cache / ".claim-b1" / "host").read_text() == "host2\n"
    assert said == ["broke the claim of host1 on b1: its run is gone"]
    assert [p.name for p in cache.iterdir()] == [".claim-b1"]


def test_a_live_run_s_claim_is_waited_for(cache):
    run = bc.controller_run(os.getpid())
    assert bc.claim(str(cache), "b1", "host1", run, wait_s=0) == "claimed"
    said, ticks = [], iter(range(100))
    out = bc.claim(
        str(cache),
        "b1",
        "host2",
        run,
        wait_s=3,
        clock=lambda: next(ticks),
        sleep=lambda _s: None,
        say=said.append,
    )
    assert out == "timeout" and said == ["waiting for host1 to compile b1"]
    assert (cache / ".claim-b1" / "waiting").read_text() == "host2\n"
    assert (cache / ".claim-b1" / "host").read_text() == "host1\n"


def test_a_waiter_takes_the_artifact_or_a_released_claim(cache):
    run = bc.controller_run(os.getpid())
    bc.claim(str(cache), "b1", "host1", run, wait_s=0)

    def publish(_s: float) -> None:
        _artifact(cache)

    assert bc.claim(str(cache), "b1", "host2", run, wait_s=10, sleep=publish, say=lambda _t: None) == "cached"
    bc.claim(str(cache), "b2", "host1", run, wait_s=0)

    def release(_s: float) -> None:
        for path in (cache / ".claim-b2").iterdir():
            path.unlink()
        (cache / ".claim-b2").rmdir()

    assert (
        bc.claim(str(cache), "b2", "host2", run, wait_s=10, sleep=release, say=lambda _t: None) == "released"
    )


def test_a_claim_that_names_no_run_is_broken_only_when_old(cache):
    (cache / ".claim-b1").mkdir()
    (cache / ".claim-b1" / "host").write_text("old\n")
    run = bc.controller_run(os.getpid())
    assert bc.claim(str(cache), "b1", "host2", run, wait_s=0, say=lambda _t: None) == "timeout"
    old = time.time() - bc.LEGACY_CLAIM_S - 5
    os.utime(cache / ".claim-b1", (old, old))
    assert bc.claim(str(cache), "b1", "host2", run, wait_s=0, say=lambda _t: None) == "claimed"


def test_the_command_line(cache, capsys):
    run = bc.controller_run(os.getpid())
    assert bc.main(["claim", str(cache), "b1", "h", run, "0"]) == 0
    assert capsys.readouterr().out == "claimed\n"
    assert bc.main(["nonsense"]) == 2
    assert "usage:" in capsys.readouterr().err
