"""scripts/devcache.py: the machine-level cache of venvs, wheels and the model, linked from a clone."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "devcache.py"
spec = importlib.util.spec_from_file_location("devcache", SCRIPT)
devcache = importlib.util.module_from_spec(spec)
sys.modules["devcache"] = devcache
spec.loader.exec_module(devcache)

DAY = 86400.0


def test_home_is_kdtree_cache_home_else_a_dev_cache_beside_never_the_products(monkeypatch, tmp_path):
    monkeypatch.setenv("KDTREE_CACHE_HOME", str(tmp_path / "c"))
    assert devcache.home() == tmp_path / "c"
    monkeypatch.delenv("KDTREE_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert devcache.home() == tmp_path / ".cache" / "kdtree-fleet-dev"


def test_link_points_the_clones_path_at_the_recipes_entry_and_a_new_recipe_at_a_new_one(tmp_path):
    cache, clone = tmp_path / "cache", tmp_path / "clone"
    first = devcache.entry_path(cache, "sglang-venv", "aaaa")
    devcache.link(clone / ".cache" / "sglang-venv", first)
    (first / "marker").write_text("in use by a demo fleet")
    second = devcache.entry_path(cache, "sglang-venv", "bbbb")
    devcache.link(clone / ".cache" / "sglang-venv", second)
    assert (clone / ".cache" / "sglang-venv").resolve() == second.resolve()
    assert (first / "marker").read_text() == "in use by a demo fleet"  # never rebuilt in place


def test_link_replaces_a_clones_own_directory_of_the_old_layout(tmp_path):
    own = tmp_path / "clone" / ".cache" / "router-venv"
    own.mkdir(parents=True)
    (own / "old").write_text("x")
    entry = devcache.entry_path(tmp_path / "cache", "router-venv", "k1")
    devcache.link(own, entry)
    assert own.is_symlink() and own.resolve() == entry.resolve()


def test_link_refuses_a_path_inside_the_cache(tmp_path):
    cache = tmp_path / "cache"
    entry = devcache.entry_path(cache, "tools-venv", "k1")
    devcache.link(tmp_path / ".venv", entry)
    with pytest.raises(ValueError, match="inside the cache"):
        devcache.link(entry, devcache.entry_path(cache, "tools-venv", "k2"))
    assert entry.is_dir() and not entry.is_symlink()


def test_entry_names_refuse_paths(tmp_path):
    with pytest.raises(ValueError, match="name"):
        devcache.entry_path(tmp_path, "../x", "k")
    with pytest.raises(ValueError, match="key"):
        devcache.entry_path(tmp_path, "x", "a/b")


def _aged(cache: Path, name: str, days: float, now: float) -> Path:
    entry = devcache.entry_path(cache, name, "k")
    devcache.link(cache.parent / "clone" / name, entry)
    os.utime(entry / devcache.LINKED, (now - days * DAY, now - days * DAY))
    return entry


def test_prune_removes_what_no_clone_linked_for_the_days_given(tmp_path):
    cache, now = tmp_path / "cache", 1_000_000_000.0
    old, recent = _aged(cache, "old", 20, now), _aged(cache, "recent", 3, now)
    assert devcache.prune(cache, 14, now=now, mounts=set()) == [old]
    assert not old.exists() and recent.exists()


def test_prune_never_removes_an_entry_a_container_mounts_or_a_build_holds(tmp_path):
    cache, now = tmp_path / "cache", 1_000_000_000.0
    mounted, building = _aged(cache, "mounted", 30, now), _aged(cache, "building", 30, now)
    lock = building.with_name(building.name + ".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        removed = devcache.prune(cache, 14, now=now, mounts={(mounted / "sub").resolve()})
    finally:
        lock.close()
    assert removed == [] and mounted.exists() and building.exists()
    assert devcache.prune(cache, 14, now=now, mounts=set()) == [building, mounted]
