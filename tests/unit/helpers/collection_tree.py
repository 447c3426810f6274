"""Where the collection's own files are for the unit tests: the collection root is the repository
root, or the tree ansible-test units stages (build/publish/tree-*/ansible_collections/kdtree/fleet).

Test files import this by its collection path
(`ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree`): ansible-test units
imports test files as collection modules, so `from conftest import ...` does not work there.
"""

from __future__ import annotations

from pathlib import Path

# <root>/tests/unit/helpers/collection_tree.py
ROOT = Path(__file__).resolve().parents[3]
# The patch as the collection ships it (the smoke check loads <patch dir>/kdtree_verify/telemetry/marker.py).
PATCH_DIR = ROOT / "files" / "sglang_ext"
