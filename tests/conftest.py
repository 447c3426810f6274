"""Every suite: the collection link exists before anything imports `ansible_collections.kdtree.fleet`.

pyproject.toml puts collections/ on pytest's path; collections/ansible_collections/kdtree/fleet is a
git-ignored link to the repository root made at set-up time (scripts/collection_link.py, its one owner).
A bare `pytest` in a fresh clone or worktree makes it here, as `make venv` does.
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = ROOT / "scripts" / "collection_link.py"

# Copies of tests/ without scripts/ (e.g. a GPU host's) bring their own path set-up.
if _SCRIPT.exists():
    _spec = importlib.util.spec_from_file_location("collection_link", _SCRIPT)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _mod.ensure(ROOT)
    # A path entry that did not exist when first looked at is cached as "no finder": forget it.
    sys.path_importer_cache.pop(str(ROOT / "collections"), None)
