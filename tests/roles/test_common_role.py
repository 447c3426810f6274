"""roles/kdtree_common (private) through ansible-playbook on localhost: the directory-safety check
refuses a world-writable parent (also one reached through a symlink) and passes a safe path; pruning
keeps the newest, the current and every version the history names. Files only under tmp_path (the
history file too, through module_defaults)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from conftest import PLAYBOOK_BIN, one_line, role_play, run_play

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")


def _run(tmp_path: Path, entry: str, role_vars: dict) -> tuple[int, str]:
    play = role_play(
        "kdtree_common",
        role_vars,
        tasks_from=entry,
        module_defaults={"kdtree.fleet.kdtree_history": {"path": str(tmp_path / "state.json")}},
    )
    return one_line(run_play(tmp_path / "common.yml", play))


SAFE = {"kdtree_common_safe_refusal": "kdtree_test: refusing X", "kdtree_common_safe_why": "Because."}


def test_a_world_writable_parent_is_refused_even_through_a_symlink(tmp_path):
    # tmp_path lies under /tmp (1777): its parents are unsafe, the link resolves there
    link = Path("/nonexistent-kdtree-common-test")
    rc, out = _run(tmp_path, "safe_dirs", {**SAFE, "kdtree_common_safe_path": str(tmp_path / "root")})
    assert rc != 0 and "kdtree_test: refusing X on localhost: these directories are writable" in out, out[
        -2000:
    ]
    assert re.search(r"1777 0 /tmp\b", out) and "Because." in out, out[-2000:]
    rc, out = _run(tmp_path, "safe_dirs", {**SAFE, "kdtree_common_safe_path": str(link / "patches")})
    assert rc == 0, out[-2000:]


def test_entries_below_are_checked_where_they_resolve(tmp_path):
    root = Path("/var/tmp") if Path("/var/tmp").stat().st_mode & 0o022 else None
    if root is None:
        pytest.skip("needs a world-writable /var/tmp")
    safe = Path("/opt") if (Path("/opt").is_dir() and not Path("/opt").stat().st_mode & 0o022) else None
    if safe is None or Path("/opt").stat().st_uid != 0:
        pytest.skip("needs a root-owned /opt that others cannot write")
    base = Path(f"/opt/kdtree-common-test-{os.getpid()}")
    base.mkdir(mode=0o755)
    try:
        target = tmp_path / "ww"
        target.mkdir()
        target.chmod(0o777)
        (base / "current").symlink_to(target)  # current -> a world-writable directory
        rc, out = _run(tmp_path, "safe_dirs", {**SAFE, "kdtree_common_safe_path": str(base)})
        assert rc == 0, out[-2000:]  # without below, only the parents count
        rc, out = _run(
            tmp_path,
            "safe_dirs",
            {**SAFE, "kdtree_common_safe_path": str(base), "kdtree_common_safe_below": ["current"]},
        )
        assert rc != 0 and f"777 0 {target}" in out, out[-2000:]
    finally:
        (base / "current").unlink(missing_ok=True)
        base.rmdir()


def test_a_relative_path_is_refused_before_anything_is_read(tmp_path):
    rc, out = _run(tmp_path, "safe_dirs", {**SAFE, "kdtree_common_safe_path": "opt/kdtree"})
    assert rc != 0 and "'opt/kdtree' is not an absolute path" in out, out[-2000:]


def test_prune_keeps_the_newest_the_current_and_what_the_history_names(tmp_path):
    root = tmp_path / "builds"
    names = [f"b{i}" for i in range(6)]
    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        os.utime(root / name, (time.time() - 1000 + i * 100,) * 2)  # b5 newest
    entry = {"id": "e1", "build_id": "b0", "patch_dir": "/p/x", "result": "healthy"}
    history.save(str(tmp_path / "state.json"), [entry])
    rc, out = _run(
        tmp_path,
        "prune",
        {
            "kdtree_common_prune_root": str(root),
            "kdtree_common_prune_keep": 2,
            "kdtree_common_prune_current": str(root / "b1"),
            "kdtree_common_prune_referenced": "build_ids",
            "kdtree_common_prune_prefix": f"{root}/",
        },
    )
    assert rc == 0, out[-3000:]
    assert sorted(p.name for p in root.iterdir()) == ["b0", "b1", "b4", "b5"]
