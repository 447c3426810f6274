"""Shared helpers for the fleet tests (no containers needed)."""

from __future__ import annotations

import sys
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
    """The kdtree_smoke module (runs on hosts) imported as a plain Python module."""
    library = ROOT / "plugins" / "modules"
    sys.path.insert(0, str(library))
    try:
        import kdtree_smoke
    finally:
        sys.path.remove(str(library))
    return kdtree_smoke
