"""The repository-wide checks: docs, make targets, layering and the roles' declared interfaces, read
from the files as they are. Nothing here runs a role, a playbook or a module (tests/roles does).

Where the repository is comes from the collection's one owner of it (tests/unit/helpers/collection_tree.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR, ROOT

__all__ = ["PATCH_DIR", "ROLES", "ROLE_NAMES", "ROOT", "load_yaml"]

ROLES = ROOT / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").exists())


def load_yaml(path: Path):
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)
