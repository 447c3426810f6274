"""Fixtures of the plugins' unit tests: the smoke check's host reader and the patch's marker module,
loaded the way the kdtree_smoke module loads them (from the collection's files/sglang_ext); the fleet
report's fixture host and /health server (tests/unit/helpers/report_host.py)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

# the tools venv and ansible-test have Ansible; the torch venv, which collects every suite too, does not
pytest.importorskip("ansible")
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import (  # noqa: F401  # pylint: disable=unused-import
    health_server,
    host,
)


@pytest.fixture(scope="module")
def hu() -> ModuleType:
    """module_utils/_smoke/host (Snapshot, parse_journal, load_marker, read_host)."""
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host")


@pytest.fixture(scope="module")
def marker(hu: ModuleType) -> ModuleType:
    """The collection's kdtree_verify/telemetry/marker.py, loaded the way the module loads a host's copy."""
    return hu.load_marker(str(PATCH_DIR))


@pytest.fixture(scope="session")
def smoke_module() -> ModuleType:
    """The kdtree_smoke module (runs on hosts), imported by its collection path as Ansible loads it."""
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.modules.kdtree_smoke")
