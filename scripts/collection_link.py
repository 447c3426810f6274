"""Make collections/ansible_collections/kdtree/fleet a link to this clone's root (git-ignored).

The clone is the collection's source, but Ansible resolves `kdtree.fleet.*` only under a directory named
ansible_collections/kdtree/fleet: ansible.cfg's collections_path (`collections`), molecule's base config
and pytest's pythonpath (pyproject.toml) find the clone through this link. It is made at set-up time
(`make collection-link`, a prerequisite of `make venv` and of every molecule target; tests/conftest.py
makes it for a bare `pytest`), never committed: ansible-test sanity refuses a directory symlink in the
repository tree. Idempotent; refuses to replace anything that is not such a link.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

LOG = logging.getLogger("collection_link")
ROOT = Path(__file__).resolve().parents[1]
LINK = Path("collections", "ansible_collections", "kdtree", "fleet")
# Relative, so that a clone, a copy or a worktree each resolve to themselves.
TARGET = Path("..", "..", "..")


def ensure(root: Path = ROOT) -> Path:
    """Create the link under `root` unless it is there already; return its path."""
    link = root / LINK
    if link.is_symlink() and Path(os.readlink(link)) == TARGET:
        return link
    if link.is_symlink() or link.exists():
        raise RuntimeError(f"{link} exists and is not a link to {TARGET}: remove it and run again")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(TARGET, target_is_directory=True)
    LOG.info("created %s -> %s", link, TARGET)
    return link


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="collection-link: %(message)s")
    try:
        ensure()
    except RuntimeError as err:
        LOG.error("%s", err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
