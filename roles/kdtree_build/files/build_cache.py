"""kdtree_build's controller steps that wait or hold a lock: claim a build's compile, run the controller's
compile under its lock. Run by ansible_playbook_python; the rules are plugins/plugin_utils/_build_cache.py's
(one owner), imported from this collection's tree (stdlib only, no Ansible needed).
Usage: build_cache.py claim CACHE ID HOST RUN WAIT_S | build_cache.py locked LOCK WAIT_S -- COMMAND...
"""

import sys
import types
from pathlib import Path

# this file is <collection>/roles/kdtree_build/files/build_cache.py: import the collection from there
_COLLECTION = Path(__file__).resolve().parents[3]
for _name, _path in (
    ("ansible_collections", []),
    ("ansible_collections.kdtree", []),
    ("ansible_collections.kdtree.fleet", [str(_COLLECTION)]),
):
    sys.modules[_name] = types.ModuleType(_name)
    sys.modules[_name].__path__ = _path

from ansible_collections.kdtree.fleet.plugins.plugin_utils import _build_cache  # noqa: E402

if __name__ == "__main__":
    sys.exit(_build_cache.main(sys.argv[1:]))
