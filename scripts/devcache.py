"""The machine-level cache of what a clone builds from a recipe (venvs, wheels, the engine model).

    devcache.py link LINK NAME KEY    print the entry <home>/<NAME>-<KEY> and point LINK (under a clone's
                                      .cache/, or its .venv) at it; the caller builds into the entry
                                      when it holds no stamp of that build yet
    devcache.py prune [--days D]      remove entries no clone linked for D days (default 14), never one
                                      in use
    devcache.py home                  print the cache's home

The home is $KDTREE_CACHE_HOME, else ~/.cache/kdtree-fleet-dev: never the product's own
~/.cache/kdtree-fleet (its build cache). An entry is named by the hash of the recipe that makes it (the
building script, its inputs, the base interpreter), so a changed recipe makes a new entry beside the old
one: an entry is never rebuilt in place for another recipe (a running demo fleet bind-mounts a venv).
Each link refreshes the entry's `.kdtree-linked` time; prune removes entries whose time is older than D
days, except an entry in use: one whose lock (`<entry>.lock`, held by a build) is taken, or that a
running container mounts (podman).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

LINKED = ".kdtree-linked"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
log = logging.getLogger("devcache")


def home() -> Path:
    explicit = os.environ.get("KDTREE_CACHE_HOME")
    return Path(explicit) if explicit else Path.home() / ".cache" / "kdtree-fleet-dev"


def entry_path(cache: Path, name: str, key: str) -> Path:
    for part, what in ((name, "name"), (key, "key")):
        if not NAME.fullmatch(part):
            raise ValueError(f"devcache: a {what} of letters, digits, '.', '_' and '-', got {part!r}")
    return cache / f"{name}-{key}"


def link(link_path: Path, entry: Path) -> None:
    """Point link_path at entry (made if missing) in one rename; a real directory left there by an older
    layout is removed first (it was this clone's own build, never shared)."""
    cache = entry.parent.resolve()
    where = link_path.parent.resolve() / link_path.name
    if where == cache or cache in where.parents:
        raise ValueError(
            f"devcache: {link_path} is inside the cache ({cache}): a clone's path links to an entry"
        )
    entry.mkdir(parents=True, exist_ok=True)
    (entry / LINKED).touch()
    link_path.parent.mkdir(parents=True, exist_ok=True)
    if link_path.is_dir() and not link_path.is_symlink():
        log.info("replacing the clone's own %s with a link to %s", link_path, entry)
        shutil.rmtree(link_path)
    tmp = link_path.with_name(f".{link_path.name}.link.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(entry)
    tmp.rename(link_path)


def _locked(entry: Path) -> bool:
    lock = entry.with_name(entry.name + ".lock")
    if not lock.exists():
        return False
    with lock.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def mounted_sources() -> set[Path]:
    """The host paths running containers mount (podman), resolved; empty without podman."""
    if not shutil.which("podman"):
        return set()
    try:
        out = subprocess.run(
            ["podman", "ps", "-q", "--no-trunc"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.split()
        if not out:
            return set()
        fmt = "{{range .Mounts}}{{.Source}}\n{{end}}"
        text = subprocess.run(
            ["podman", "inspect", "--format", fmt, *out],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        # unknown mounts: nothing may be pruned (an entry in use must never go)
        raise RuntimeError(f"devcache: could not list the running containers' mounts: {exc}") from exc
    return {Path(line).resolve() for line in text.splitlines() if line.strip()}


def in_use(entry: Path, mounts: set[Path]) -> bool:
    real = entry.resolve()
    return _locked(entry) or any(m == real or real in m.parents for m in mounts)


def prune(cache: Path, days: float, now: float | None = None, mounts: set[Path] | None = None) -> list[Path]:
    """Remove the entries last linked more than `days` ago and not in use; return what was removed."""
    if not cache.is_dir():
        return []
    now = time.time() if now is None else now
    mounts = mounted_sources() if mounts is None else mounts
    removed = []
    for entry in sorted(p for p in cache.iterdir() if p.is_dir() and not p.is_symlink()):
        stamp = entry / LINKED
        last = stamp.stat().st_mtime if stamp.exists() else entry.stat().st_mtime
        if now - last < days * 86400:
            continue
        if in_use(entry, mounts):
            log.info("keeping %s: in use", entry)
            continue
        log.info("removing %s: last linked %.0f days ago", entry, (now - last) / 86400)
        shutil.rmtree(entry)
        entry.with_name(entry.name + ".lock").unlink(missing_ok=True)
        removed.append(entry)
    return removed


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(name)s: %(message)s", level=logging.INFO)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("link")
    p.add_argument("link", type=Path)
    p.add_argument("name")
    p.add_argument("key")
    p = sub.add_parser("prune")
    p.add_argument("--days", type=float, default=14.0)
    sub.add_parser("home")
    args = parser.parse_args(argv)
    cache = home()
    if args.cmd == "home":
        print(cache)
        return 0
    if args.cmd == "prune":
        prune(cache, args.days)
        return 0
    try:
        entry = entry_path(cache, args.name, args.key)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        link(args.link, entry)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    print(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
