"""Shared helpers for the fleet tests (no containers needed)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").exists())


def load_yaml(path: Path):
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="session")
def smoke_module():
    """The kdtree_smoke module (runs on hosts), imported by its collection path as Ansible loads it.

    collections/ansible_collections/kdtree/fleet links to the repository root; pyproject.toml puts
    collections/ on the path, so the module's `ansible_collections.kdtree.fleet.plugins.module_utils`
    imports resolve.
    """
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.modules.kdtree_smoke")
