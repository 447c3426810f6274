"""Shared helpers for the fleet tests (no containers needed)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
# The patch as this repository ships it (the smoke check loads <patch dir>/kdtree_verify/telemetry/marker.py).
PATCH_DIR = ROOT / "files" / "sglang_ext"
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


@pytest.fixture(scope="module")
def hu(smoke_module):
    """module_utils/_smoke_host (Snapshot, parse_journal, load_marker, read_host)."""
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._smoke_host")


@pytest.fixture(scope="module")
def marker(hu):
    """The repository's kdtree_verify/telemetry/marker.py, loaded the way the module loads a host's copy."""
    return hu.load_marker(str(PATCH_DIR))
